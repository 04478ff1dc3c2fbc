"""Writing a file whole or not at all: under a temporary name that names its writer, then renamed."""

from __future__ import annotations

import os
import threading
from typing import BinaryIO, Callable


def temporary_name(path: str) -> str:
  """`<path>.<pid>.<thread>.tmp`: names its writer, so a later run removes it only once that died.

  Two writers of one path never share a temporary file, where a fixed
  `<path>.tmp` would let one rename the other's half-written bytes.
  """
  return f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"


def writer_alive(tmp_name: str) -> bool:
  """Whether the process that names itself in `<file>.<pid>.<thread>.tmp` still runs."""
  try:
    pid = int(tmp_name.split(".")[-3])
    os.kill(pid, 0)
  except (ValueError, IndexError):
    return False  # Not one of ours by name: leave nothing unparsable behind either.
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Someone else's live process.
  return True


def remove(path: str) -> None:
  """Removes `path` if it is there."""
  try:
    os.remove(path)
  except FileNotFoundError:
    pass


def write_with(path: str, write: Callable[[BinaryIO], None]) -> None:
  """write(file) into a temporary file, renamed to `path`; a failure removes the temporary file."""
  tmp = temporary_name(path)
  try:
    with open(tmp, "wb") as f:
      write(f)
    os.replace(tmp, path)
  except BaseException:
    remove(tmp)
    raise


def atomic_write(path: str, *chunks: bytes) -> None:
  """Writes `path` (`chunks`, end to end) whole or not at all (`write_with`)."""

  def write(f: BinaryIO) -> None:
    for chunk in chunks:
      f.write(chunk)

  write_with(path, write)
