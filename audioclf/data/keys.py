"""What a file is: the fingerprint of its content, remembered on this host by what stat says of it.

A split's key hashes its files' content fingerprints in order (never their
paths or mtimes), so a dataset copied with plain `cp` to another folder or
host finds the cache it filled, and an edit that puts the mtime back is still
a new file. Reading every file at every start would cost as much as decoding
it, so each fingerprint is remembered in a small SQLite file on this host
(`$AUDIOCLF_FINGERPRINTS`, default `~/.cache/audioclf/fingerprints.sqlite3`)
under the file's (device, inode, size, mtime, ctime): ctime moves on every
write, whatever the writer does to the mtime, so a file whose stat matches
is not read again, and one whose stat changed is read once. A whole split's
list is remembered too, so a warm start costs one query however many files.

numpy-free and TensorFlow-free: the cache command and tests use it directly.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import sqlite3
from typing import Optional, Sequence

from absl import logging

from audioclf.data.manifest import Example

FINGERPRINTS_ENV = "AUDIOCLF_FINGERPRINTS"
DIGEST_BYTES = 16
_CHUNK = 1 << 20


def default_cache_dir() -> str:
  return os.environ.get("AUDIOCLF_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "audioclf")


def digest(*parts) -> str:
  """A 32-hex-digit key of `parts` (one hash update over "part\\0part\\0...")."""
  data = "".join(f"{p}\0" for p in parts).encode("utf-8")
  return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def content_fingerprint(path: str) -> Optional[str]:
  """blake2b of the file's bytes, hex; None when it cannot be read (decoding will say why).

  hashlib drops the GIL on large updates, so threads fingerprint in parallel.
  """
  h = hashlib.blake2b(digest_size=DIGEST_BYTES)
  try:
    with open(path, "rb") as f:
      while True:
        chunk = f.read(_CHUNK)
        if not chunk:
          return h.hexdigest()
        h.update(chunk)
  except OSError:
    return None


def _stat_key(e: Example) -> tuple[int, int, int, int, int]:
  return (e.device, e.inode, e.size, e.mtime_ns, e.ctime_ns)


class Fingerprints:
  """Content fingerprints of files, remembered by their stat in a SQLite file on this host.

  Every method works without the memo too (a read-only home, a locked or
  damaged database): it then reads and hashes the files, and says so once.
  `hashed` counts the files this object read to fingerprint them.
  """

  def __init__(self, path: Optional[str] = None):
    self.path = path or os.environ.get(FINGERPRINTS_ENV) or os.path.join(
        default_cache_dir(), "fingerprints.sqlite3")
    self.hashed = 0
    self._warned = False

  def _connect(self) -> Optional[sqlite3.Connection]:
    try:
      os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
      db = sqlite3.connect(self.path, timeout=60)
      db.execute("CREATE TABLE IF NOT EXISTS files (device INTEGER, inode INTEGER, size INTEGER,"
                 " mtime INTEGER, ctime INTEGER, fp TEXT, PRIMARY KEY (device, inode))")
      db.execute("CREATE TABLE IF NOT EXISTS lists (key TEXT PRIMARY KEY, fps TEXT)")
      db.execute("CREATE TABLE IF NOT EXISTS checked (device INTEGER, inode INTEGER, size INTEGER,"
                 " mtime INTEGER, ctime INTEGER, PRIMARY KEY (device, inode))")
      return db
    except (OSError, sqlite3.Error) as e:
      self._warn(e)
      return None

  def _warn(self, error: Exception) -> None:
    if not self._warned:
      self._warned = True
      logging.warning("audioclf: cannot use the fingerprint memo %s (%s): files are read to "
                      "fingerprint them on every start", self.path, error)

  def of(self, examples: Sequence[Example]) -> list[str]:
    """Each file's content fingerprint, in order: from the memo where its stat matches, else read."""
    if not examples:
      return []
    list_key = digest("stats", *(_stat_key(e) for e in examples))
    db = self._connect()
    try:
      if db is not None:
        try:
          row = db.execute("SELECT fps FROM lists WHERE key = ?", (list_key,)).fetchone()
          if row is not None and len(row[0]) == 2 * DIGEST_BYTES * len(examples):
            width = 2 * DIGEST_BYTES
            return [row[0][i * width:(i + 1) * width] for i in range(len(examples))]
        except sqlite3.Error as e:
          self._warn(e)
          db = None
      fps, readable = self._per_file(db, examples)
      if db is not None and all(readable):
        try:
          with db:
            db.execute("INSERT OR REPLACE INTO lists VALUES (?, ?)", (list_key, "".join(fps)))
        except sqlite3.Error as e:
          self._warn(e)
      return fps
    finally:
      if db is not None:
        db.close()

  def _per_file(self, db: Optional[sqlite3.Connection], examples: Sequence[Example],
                ) -> tuple[list[str], list[bool]]:
    fps: list[Optional[str]] = [None] * len(examples)
    if db is not None:
      try:
        for i, e in enumerate(examples):
          row = db.execute("SELECT size, mtime, ctime, fp FROM files WHERE device = ? AND "
                           "inode = ?", (e.device, e.inode)).fetchone()
          if row is not None and tuple(row[:3]) == (e.size, e.mtime_ns, e.ctime_ns) and e.inode:
            fps[i] = row[3]
      except sqlite3.Error as e:
        self._warn(e)
        db = None
    missing = [i for i, fp in enumerate(fps) if fp is None]
    readable = [True] * len(examples)
    if missing:
      # Reading is I/O and hashing drops the GIL: a thread per core reads them all at once.
      with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for i, fp in zip(missing, pool.map(content_fingerprint,
                                           [examples[i].path for i in missing])):
          # An unreadable file gets a key of its own, never remembered: its
          # decode fails (or is skipped) and names it.
          fps[i] = fp or digest("unreadable", examples[i].path)
          readable[i] = fp is not None
      self.hashed += len(missing)
      if db is not None:
        try:
          with db:
            db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?)",
                           [(*_stat_key(examples[i]), fps[i]) for i in missing
                            if examples[i].inode and readable[i]])
        except sqlite3.Error as e:
          self._warn(e)
    return fps, readable  # type: ignore[return-value]

  def checked(self, path: str) -> bool:
    """Whether `path`'s bytes were checked (`remember_checked`) and not written since."""
    try:
      st = os.stat(path)
    except OSError:
      return False
    db = self._connect()
    if db is None:
      return False
    try:
      row = db.execute("SELECT size, mtime, ctime FROM checked WHERE device = ? AND inode = ?",
                       (st.st_dev, st.st_ino)).fetchone()
      return row is not None and tuple(row) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except sqlite3.Error as e:
      self._warn(e)
      return False
    finally:
      db.close()

  def remember_checked(self, path: str) -> None:
    """Records that `path`'s bytes, as they are now, were checked (or just written)."""
    try:
      st = os.stat(path)
    except OSError:
      return
    db = self._connect()
    if db is None:
      return
    try:
      with db:
        db.execute("INSERT OR REPLACE INTO checked VALUES (?, ?, ?, ?, ?)",
                   (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    except sqlite3.Error as e:
      self._warn(e)
    finally:
      db.close()
