"""`--preset=NAME` and `--flagfile=PATH` on a command line, read into the flags they hold.

A preset is a flagfile shipped inside the package (audioclf.presets), so it
works from an installed wheel as from a checkout. Both are read here, before
absl parses the flags, and in both a line `--preset=NAME` or
`--flagfile=PATH` is read in its place: a preset may include another by name
wherever it is installed. Later flags override earlier ones, as in absl.
"""

from __future__ import annotations

import importlib.resources
from typing import Sequence

from audioclf.params import ParamError

PRESET = "--preset="
FLAGFILE = "--flagfile="
PACKAGE = "audioclf.presets"


def names() -> list[str]:
  """The presets audioclf ships."""
  return sorted(f.name[:-len(".flags")] for f in importlib.resources.files(PACKAGE).iterdir()
                if f.name.endswith(".flags"))


def expand(argv: Sequence[str], reading: tuple[str, ...] = ()) -> list[str]:
  """`argv` with each --preset=NAME and --flagfile=PATH replaced by the flags it holds.

  Arguments after a lone `--` (another program's, as launch passes them on)
  are left as they are.

  Raises:
    ParamError: an unknown preset (the message lists them), a flagfile that
      cannot be read, or a file that includes itself.
  """
  expanded = []
  for i, arg in enumerate(argv):
    if arg == "--":
      return expanded + list(argv[i:])
    if arg.startswith((PRESET, FLAGFILE)):
      source, text = _read(arg)
      if source in reading:
        raise ParamError(f"{arg}: {' -> '.join(reading + (source,))} includes itself")
      expanded += expand(_flags(text), reading + (source,))
    else:
      expanded.append(arg)
  return expanded


def _read(arg: str) -> tuple[str, str]:
  """(where, text) of the file a --preset= or --flagfile= argument names."""
  if arg.startswith(PRESET):
    name = arg[len(PRESET):]
    resource = importlib.resources.files(PACKAGE) / f"{name}.flags"
    if "/" in name or not resource.is_file():
      raise ParamError(f"{arg}: no such preset; audioclf ships {', '.join(names())} (or give "
                       "--flagfile=PATH)")
    return f"preset {name}", resource.read_text()
  path = arg[len(FLAGFILE):]
  try:
    with open(path) as f:
      return path, f.read()
  except OSError as e:
    raise ParamError(f"{arg}: cannot read it ({e.strerror or e})") from None


def _flags(text: str) -> list[str]:
  """A flagfile's flags: one a line, blank lines and comments (#, //) left out, as absl reads it."""
  lines = (line.strip() for line in text.splitlines())
  return [line for line in lines if line and not line.startswith(("#", "//"))]
