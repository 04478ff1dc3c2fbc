"""The package's shape: a light `import audioclf`, its functions, layers with no import back up (and their drawing in docs/README.md up to date), every command runnable."""

import os
import pkgutil
import subprocess
import sys

import pytest

import audioclf
from audioclf import commands
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
# The layers (LAYERS) and the reading of the imports are written once, in the tool that draws them.
import import_graph  # noqa: E402  pylint: disable=wrong-import-position

KNOWN = import_graph.modules()


def _layer(module: str) -> int:
  try:
    return import_graph.layer(module)
  except ValueError as e:
    raise AssertionError(str(e)) from None


def _modules() -> list[str]:
  return sorted(set(KNOWN) - {"audioclf"})


def _imports(module: str) -> set[str]:
  """The audioclf modules `module` imports, anywhere in it (inside functions too)."""
  return import_graph.imports(module, KNOWN)


def test_the_source_walk_finds_the_modules_python_finds():
  assert _modules() == sorted(m.name for m in pkgutil.walk_packages(audioclf.__path__, "audioclf."))


def test_every_import_goes_to_the_same_layer_or_a_lower_one():
  upward = []
  for module in _modules():
    for imported in _imports(module) - {"audioclf"}:
      if _layer(imported) > _layer(module):
        upward.append(f"{module} (layer {_layer(module)}) imports {imported} "
                      f"(layer {_layer(imported)})")
  assert not upward, "\n".join(upward)


def test_no_module_imports_the_package_root():
  # `import audioclf` inside the package would run back up to the top, past every layer.
  assert not [m for m in _modules() if "audioclf" in _imports(m)]


def test_no_import_cycle_between_modules():
  graph = {m: {i for i in _imports(m) if i in set(_modules())} for m in _modules()}
  state = {}

  def visit(node, path):
    state[node] = "open"
    for nxt in sorted(graph[node]):
      if state.get(nxt) == "open":
        raise AssertionError(" -> ".join(path + [node, nxt]))
      if nxt not in state:
        visit(nxt, path + [node])
    state[node] = "done"

  for module in sorted(graph):
    if module not in state:
      visit(module, [])


def test_the_drawing_in_docs_readme_is_todays_import_graph():
  with open(import_graph.README) as f:
    drawn = import_graph.drawn(f.read())
  assert drawn is not None, f"docs/README.md lost its {import_graph.BEGIN} ... {import_graph.END}"
  assert drawn == import_graph.drawing(), "stale: run python tools/import_graph.py"


def test_the_drawing_has_no_arrow_up_and_no_circle():
  with open(import_graph.README) as f:
    edges = import_graph.drawn_edges(f.read())
  units = {import_graph.node_id(import_graph.unit(m)): import_graph.unit(m) for m in _modules()}
  assert edges and {n for edge in edges for n in edge} <= set(units)
  upward = [f"{units[a]} --> {units[b]}" for a, b in edges
            if _layer(units[a]) < _layer(units[b])]
  assert not upward, "\n".join(upward)
  reach = {a: {b for x, b in edges if x == a} for a in units}
  for _ in units:  # The transitive closure: a circle puts a unit among those it reaches.
    reach = {a: r.union(*(reach[b] for b in r)) for a, r in reach.items()}
  assert not [a for a, r in reach.items() if a in r]


def test_an_import_inside_a_function_and_a_relative_one_count(tmp_path):
  package = tmp_path / "audioclf"
  (package / "data").mkdir(parents=True)
  for path in ("__init__.py", "params.py", "data/__init__.py", "data/store.py"):
    (package / path).write_text("")
  (package / "data" / "fill.py").write_text(
      "def f():\n  from . import store\n  from ..params import Params\n  import numpy\n")
  known = import_graph.modules(str(tmp_path))
  assert import_graph.imports("audioclf.data.fill", known) == {"audioclf.data.store",
                                                               "audioclf.params"}
  assert import_graph.graph(str(tmp_path)) == {("audioclf.data", "audioclf.params"): 1}


def test_import_is_light():
  code = "import sys, audioclf; print('tensorflow' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("name", audioclf.__all__)
def test_public_names_are_what_they_say(name):
  value = getattr(audioclf, name)
  assert callable(value) and value.__name__ == name


def test_every_command_module_is_listed_and_every_listed_one_exists():
  modules = {m.name for m in pkgutil.iter_modules(commands.__path__)} - {"cli", "flags", "flagfiles", "quiet"}
  assert modules == set(commands.COMMANDS)


def _scripts() -> dict[str, str]:
  import tomllib  # pylint: disable=g-import-not-at-top
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["project"]["scripts"]


def test_every_command_has_a_console_script():
  assert set(_scripts()) == {"audioclf", *(f"audioclf-{name}" for name in commands.COMMANDS)}


@pytest.mark.parametrize("script", sorted(_scripts()))
def test_installed_console_script_answers_help(script):
  # The venv's own script, as a user runs it after `pip install`: it exists and imports.
  path = os.path.join(os.path.dirname(sys.executable), script)
  assert os.path.isfile(path), f"{script} is not installed in {sys.prefix}: reinstall audioclf"
  out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "usage" in out.stdout.lower() or "flags" in out.stdout.lower(), out.stdout[-2000:]


def test_python_m_audioclf_lists_the_commands_and_refuses_an_unknown_one():
  listed = warm.run([sys.executable, "-m", "audioclf"], capture_output=True, text=True,
                    timeout=60, cwd=ROOT)
  assert listed.returncode == 2 and all(name in listed.stdout for name in commands.COMMANDS)
  wrong = warm.run([sys.executable, "-m", "audioclf", "trian"], capture_output=True,
                   text=True, timeout=60, cwd=ROOT)
  assert wrong.returncode == 2 and "no command 'trian'" in wrong.stderr
