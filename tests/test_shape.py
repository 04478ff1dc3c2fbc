"""The package's size: every function of audioclf/ fits a screen, every file holds one idea."""

import ast
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FUNCTION_LINES = 60  # From its def line to its last, decorators left out.
MAX_FILE_LINES = 450


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
  """(name, first line, lines) of every function in `source` longer than `limit` lines."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      lines = node.end_lineno - node.lineno + 1
      if lines > limit:
        found.append((node.name, node.lineno, lines))
  return found


def _sources() -> dict[str, str]:
  """{path relative to the repository: text} of every module of audioclf/."""
  found = {}
  for folder, _, files in os.walk(os.path.join(ROOT, "audioclf")):
    for name in sorted(files):
      path = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
      if name.endswith(".py"):
        with open(os.path.join(ROOT, path)) as f:
          found[path] = f.read()
  return found


def _function(name: str, lines: int) -> str:
  """A function `name` of `lines` lines, its def line included."""
  return f"def {name}():\n" + "".join(f"  x = {i}\n" for i in range(lines - 1))


def test_the_check_finds_a_function_one_line_too_long_and_only_it():
  source = ("@functools.cache\n" + _function("fits", MAX_FUNCTION_LINES)  # Decorator not counted.
            + "\nclass C:\n" + textwrap.indent(_function("long", MAX_FUNCTION_LINES + 1), "  "))
  assert long_functions(source) == [("long", MAX_FUNCTION_LINES + 4, MAX_FUNCTION_LINES + 1)]


def test_the_scope_reads_the_package():
  sources = _sources()
  assert {"audioclf/params/__init__.py", "audioclf/data/pipeline.py",
          "audioclf/data/augmentations/reverb.py"} <= set(sources)


def test_every_function_fits_a_screen():
  found = [f"{path}:{line} {name}: {lines} lines" for path, source in _sources().items()
           for name, line, lines in long_functions(source)]
  assert not found, f"over {MAX_FUNCTION_LINES} lines; split into named steps:\n" + "\n".join(found)


def test_every_file_holds_one_idea():
  found = [f"{path}: {source.count(chr(10))} lines" for path, source in _sources().items()
           if source.count("\n") > MAX_FILE_LINES]
  assert not found, f"over {MAX_FILE_LINES} lines; split by idea:\n" + "\n".join(found)
