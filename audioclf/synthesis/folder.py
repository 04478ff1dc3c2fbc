"""A dataset's folder, written whole or not at all: built beside its place, swapped in at the end.

So an interrupted run never leaves a half-written dataset behind, files of an
older dataset with other words never mix in, and only a folder the generator
wrote (it holds the stamp) is ever replaced.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from audioclf.synthesis.settings import STAMP_NAME, SynthesisError


def check_replaceable(out: Path) -> None:
  """Raises SynthesisError unless out is missing, empty, or a dataset the generator wrote."""
  if out.exists() and not out.is_dir():
    raise SynthesisError(f"--out {out} exists and is not a directory")
  # The old folder is swapped out and deleted, which would pull the ground from under a shell
  # or process sitting inside it.
  cwd = Path(os.getcwd())
  if cwd == out or out in cwd.parents:
    raise SynthesisError(f"--out {out} holds the current directory; use a subfolder")
  # Replacing the folder deletes it, so only ever delete what the generator wrote.
  if out.is_dir() and any(out.iterdir()) and not (out / STAMP_NAME).exists():
    raise SynthesisError(
        f"--out {out} is not empty and was not written by audioclf synthesize (no {STAMP_NAME}); "
        "remove it or choose another --out")


def partial(out: Path) -> Path:
  """A new, empty folder beside out to build the dataset in.

  Not mkdtemp: its 0700 mode would end up on out; mkdir honours the umask.

  Raises:
    SynthesisError: out's parent cannot be written.
  """
  try:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
  except OSError as e:
    raise SynthesisError(f"--out {out}: cannot create it ({e.strerror or e}: {e.filename})"
                         ) from None
  return tmp


def swap_in(tmp: Path, out: Path) -> None:
  """Puts the finished tmp in out's place; the dataset that was there, if any, is deleted."""
  if out.exists():
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
  else:
    os.replace(tmp, out)


def write_atomically(path: Path, text: str) -> None:
  part = path.with_name(path.name + ".part")
  part.write_text(text)
  os.replace(part, path)
