"""The imports between audioclf's sub-packages, read from the source and drawn into docs/README.md.

  python tools/import_graph.py           # rewrites the drawing in docs/README.md
  python tools/import_graph.py --check   # exits 1 if the drawing differs from today's source
  python tools/import_graph.py --print   # prints the drawing

Reads every module of the package with `ast` (no import, so no TensorFlow):
each `import` and `from ... import` anywhere in it, at module level or inside
a function, relative ones resolved. A unit is a sub-package (a folder:
data/, model/, ...) or a top-level module (files.py, __main__.py); the
graph has one edge per pair of units where a module of the first imports one
of the second. The package root (audioclf/__init__.py, which imports the
public functions by name on first use) is the package's face, not a layer,
and is left out.

LAYERS is the one statement of the layering: a module may import its own
layer and those before it, never one after. tests/test_package.py checks it
on every module and that the drawing in docs/README.md is what this tool
writes today. The drawing is a mermaid `graph TD` between BEGIN and END:
a box per layer, the highest at the top, and an arrow A --> B where A
imports B, so every arrow points down.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import sys
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "audioclf"
README = os.path.join(ROOT, "docs", "README.md")
BEGIN = "<!-- import graph: tools/import_graph.py -->"
END = "<!-- end import graph -->"
# The layers, lowest first: a module may import its own layer and those before it, never after.
LAYERS = (
    ("audioclf.params", "audioclf.presets", "audioclf.files"),
    ("audioclf.compat",),
    ("audioclf.data", "audioclf.synthesis"),
    ("audioclf.model",),
    ("audioclf.embeddings",),
    ("audioclf.distributed",),
    ("audioclf.engines",),
    ("audioclf.deploy",),
    ("audioclf.streaming",),
    ("audioclf.tuning", "audioclf.migration"),
    ("audioclf.commands", "audioclf.__main__"),
)
EDGE = re.compile(r"^\s*(\w+) --> (\w+)\s*$")


def layer(module: str) -> int:
  """The index in LAYERS of the layer `module` (or a unit) belongs to.

  Raises:
    ValueError: `module` is in no layer.
  """
  for i, prefixes in enumerate(LAYERS):
    if any(module == p or module.startswith(p + ".") for p in prefixes):
      return i
  raise ValueError(f"{module} is in no layer of tools/import_graph.py's LAYERS: add it where it "
                   "belongs")


def modules(root: str = ROOT) -> dict[str, str]:
  """Every module of the package under `root`, the package root included: {name: file path}."""
  found = {}
  base = os.path.join(root, PACKAGE)
  for folder, dirs, files in os.walk(base):
    dirs[:] = sorted(d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py")))
    rel = os.path.relpath(folder, base)
    package = ".".join([PACKAGE, *([] if rel == os.curdir else rel.split(os.sep))])
    for name in sorted(files):
      if name.endswith(".py"):
        stem = name[:-3]
        found[package if stem == "__init__" else f"{package}.{stem}"] = os.path.join(folder, name)
  return found


def imports(module: str, known: Optional[dict[str, str]] = None) -> set[str]:
  """The package's modules `module` imports, anywhere in it (inside functions too).

  `from audioclf.data import store` imports the module audioclf.data.store;
  `from audioclf.params import Params` the module audioclf.params.

  Args:
    module: a name modules() lists.
    known: modules()'s answer, when the caller has it.
  """
  known = modules() if known is None else known
  with open(known[module]) as f:
    tree = ast.parse(f.read(), known[module])
  package = module if known[module].endswith("__init__.py") else module.rpartition(".")[0]
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      source = node.module or ""
      if node.level:  # Relative: from the package, up level - 1 folders.
        parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
        source = ".".join(parts + ([node.module] if node.module else []))
      found.update(f"{source}.{a.name}" if f"{source}.{a.name}" in known else source
                   for a in node.names)
  return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def unit(module: str) -> str:
  """The sub-package or top-level module a module belongs to: audioclf.data.store -> audioclf.data."""
  return ".".join(module.split(".")[:2])


def graph(root: str = ROOT) -> dict[tuple[str, str], int]:
  """{(importing unit, imported unit): how many module-to-module imports}, the package root left out."""
  known = modules(root)
  edges = collections.Counter()
  for module in known:
    if module == PACKAGE:
      continue
    for imported in imports(module, known) - {PACKAGE}:
      if unit(module) != unit(imported):
        edges[(unit(module), unit(imported))] += 1
  return dict(edges)


def node_id(name: str) -> str:
  """A unit's id in the drawing: audioclf.data -> data, audioclf.__main__ -> main."""
  return name.split(".")[-1].strip("_")


def _label(name: str, known: dict[str, str]) -> str:
  short = name.split(".")[-1]
  return f"{short}/" if known[name].endswith("__init__.py") else f"{short}.py"


def mermaid(edges: dict[tuple[str, str], int], root: str = ROOT) -> str:
  """The drawing of `edges` as a fenced mermaid `graph TD` block: a box per layer, highest first."""
  known = modules(root)
  units = sorted({unit(m) for m in known if m != PACKAGE}, key=lambda u: (layer(u), u))
  lines = ["```mermaid", "graph TD"]
  for i in reversed(range(len(LAYERS))):
    mine = [u for u in units if layer(u) == i]
    if not mine:
      continue
    lines.append(f"  subgraph layer{i} [\"layer {i}\"]")
    lines += [f"    {node_id(u)}[\"{_label(u, known)}\"]" for u in mine]
    lines.append("  end")
  order = sorted(edges, key=lambda e: (-layer(e[0]), e[0], -layer(e[1]), e[1]))
  lines += [f"  {node_id(a)} --> {node_id(b)}" for a, b in order]
  return "\n".join(lines + ["```"])


def drawing(root: str = ROOT) -> str:
  """What goes between BEGIN and END in docs/README.md today: the caption and the drawing."""
  caption = ("*Generated by `python tools/import_graph.py` from the source (every import, in "
             "functions too): A --> B where a module of A imports one of B; each layer imports "
             "only itself and those below it.*")
  return f"{BEGIN}\n{caption}\n\n{mermaid(graph(root), root)}\n{END}"


def drawn(text: str) -> Optional[str]:
  """The drawing in `text` (a page), BEGIN to END included; None where it has none."""
  begin, end = text.find(BEGIN), text.find(END)
  if begin < 0 or end < begin:
    return None
  return text[begin:end + len(END)]


def drawn_edges(text: str) -> set[tuple[str, str]]:
  """The arrows of the drawing in `text`, as pairs of node ids."""
  return {m.groups() for m in map(EDGE.match, (drawn(text) or "").splitlines()) if m}


def write(path: str = README, root: str = ROOT) -> bool:
  """Puts today's drawing between the markers of `path`; True if that changed the page.

  Raises:
    ValueError: the page has no BEGIN ... END markers.
  """
  with open(path) as f:
    text = f.read()
  old = drawn(text)
  if old is None:
    raise ValueError(f"{path} has no {BEGIN} ... {END} markers: put them where the drawing goes")
  new = drawing(root)
  if old == new:
    return False
  with open(path, "w") as f:
    f.write(text.replace(old, new))
  return True


def main(argv: Optional[list[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true",
                      help="change nothing; exit 1 if docs/README.md's drawing is stale")
  parser.add_argument("--print", action="store_true", help="print the drawing, change nothing")
  args = parser.parse_args(argv)
  if args.print:
    print(drawing())
    return 0
  if args.check:
    with open(README) as f:
      stale = drawn(f.read()) != drawing()
    print(f"{os.path.relpath(README, ROOT)}: the import graph is "
          f"{'stale: run python tools/import_graph.py' if stale else 'up to date'}")
    return int(stale)
  changed = write()
  print(f"{'wrote' if changed else 'unchanged:'} the import graph in "
        f"{os.path.relpath(README, ROOT)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
