"""The package's shape: a light `import audioclf`, its functions, layers with no import back up, every command runnable."""

import ast
import importlib.util
import os
import pkgutil
import subprocess
import sys

import pytest

import audioclf
from audioclf import commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The layers, lowest first: a module may import its own layer and those before it, never after.
LAYERS = (
    ("audioclf.params",),
    ("audioclf.compat",),
    ("audioclf.data",),
    ("audioclf.model",),
    ("audioclf.distributed",),
    ("audioclf.engines",),
    ("audioclf.deploy",),
    ("audioclf.tuning", "audioclf.migration"),
    ("audioclf.commands", "audioclf.__main__"),
)


def _layer(module: str) -> int:
  for i, prefixes in enumerate(LAYERS):
    if any(module == p or module.startswith(p + ".") for p in prefixes):
      return i
  raise AssertionError(f"{module} is in no layer of LAYERS: add it where it belongs")


def _modules() -> list[str]:
  return [m.name for m in pkgutil.walk_packages(audioclf.__path__, "audioclf.")]


def _imports(module: str) -> set[str]:
  """The audioclf modules `module` imports, anywhere in it (inside functions too)."""
  with open(importlib.util.find_spec(module).origin) as f:
    tree = ast.parse(f.read())
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      # `from audioclf.data import store` imports the module audioclf.data.store.
      found.update(f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}")
                   else node.module for a in node.names)
  return {name for name in found if name == "audioclf" or name.startswith("audioclf.")}


def _is_module(name: str) -> bool:
  try:
    return importlib.util.find_spec(name) is not None
  except ModuleNotFoundError:
    return False


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


def test_import_is_light():
  code = "import sys, audioclf; print('tensorflow' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("name", audioclf.__all__)
def test_public_names_are_what_they_say(name):
  value = getattr(audioclf, name)
  assert callable(value) and value.__name__ == name


def test_every_command_module_is_listed_and_every_listed_one_exists():
  modules = {m.name for m in pkgutil.iter_modules(commands.__path__)} - {"cli", "flags", "quiet"}
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
  listed = subprocess.run([sys.executable, "-m", "audioclf"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
  assert listed.returncode == 2 and all(name in listed.stdout for name in commands.COMMANDS)
  wrong = subprocess.run([sys.executable, "-m", "audioclf", "trian"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
  assert wrong.returncode == 2 and "no command 'trian'" in wrong.stderr
