"""The clip cache of one set of decode parameters: names, writes and opens its files (`Store`).

Every file is written under a temporary name and renamed into place, and a
failed write (a full disk) removes its temporary file: a reader never sees
half a file, two processes filling the same cache write identical bytes under
the same names, and the marker, renamed into place last, is the only thing a
reader trusts. A run killed while filling leaves no marker, and the next run
fills again, reusing the entries it finds: no locks to go stale.

The format and the checks are `cache_format`; info, verify and prune are
`cache_maintenance`. numpy only; no TensorFlow.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Callable, Optional, Sequence

import numpy as np
from absl import logging

from audioclf import files
from audioclf.data import cache_format, decoders
from audioclf.data import keys as keys_lib
from audioclf.data.cache_format import (ENTRY, FLOAT32, FORMAT, KEYS, PCM16, SCHEMA,
                                        SKIPPED_LENGTH, CacheWriteError, DamagedSplitError,
                                        NotNative, Split, check_files, data_path, index_path,
                                        keys_path, marker_path)


def _touch(path: str) -> None:
  """Marks a cache file as just used; a read-only cache stays as it is."""
  try:
    os.utime(path)
  except OSError:
    pass


@functools.cache
def _warn_not_writable(root: str, reason: str) -> None:
  # Once per folder and process: every input_fn call of a run would say it again.
  logging.warning("audioclf: the cache folder %s cannot be written (%s): decoding without "
                  "caching", root, reason)


class Store:
  """Names, writes, checks and opens the cache files of one set of decode parameters."""

  def __init__(self, cache_dir: Optional[str], sample_rate: int, resample_quality: str,
               fingerprints: Optional[keys_lib.Fingerprints] = None):
    # Every decoder's name and version: a new version decodes into a new folder (entries and
    # splits alike), so no clip an older one decoded is served.
    self.decode_key = keys_lib.digest("decode", FORMAT, "sr", sample_rate, "q", resample_quality,
                                      "mono", *decoders.key())
    self.cache_dir = cache_dir or keys_lib.default_cache_dir()
    self.root = os.path.join(self.cache_dir, self.decode_key)
    self.entries_dir = os.path.join(self.root, "entries")
    self.splits_dir = os.path.join(self.root, "splits")
    self.fingerprints = fingerprints or keys_lib.Fingerprints()
    self._writable: Optional[bool] = None

  @classmethod
  def for_params(cls, params, fingerprints: Optional[keys_lib.Fingerprints] = None) -> "Store":
    return cls(params.cache_dir, params.sample_rate, params.resample_quality, fingerprints)

  # --- Names.

  def split_base(self, fingerprints: Sequence[str]) -> str:
    """Path prefix of a split's files: its key hashes its files' content fingerprints, in order."""
    return os.path.join(self.splits_dir, keys_lib.digest("split", *fingerprints))

  def entry_path(self, fingerprint: str) -> str:
    return os.path.join(self.entries_dir, fingerprint[:2], fingerprint + ENTRY)

  # --- Writing.

  @property
  def writable(self) -> bool:
    """Whether this process can write the cache: else it decodes without caching (one warning)."""
    if self._writable is None:
      try:
        os.makedirs(self.splits_dir, exist_ok=True)
        os.makedirs(self.entries_dir, exist_ok=True)
        probe = files.temporary_name(os.path.join(self.splits_dir, "write-probe"))
        with open(probe, "wb"):
          pass
        os.remove(probe)
        self._writable = True
      except OSError as e:
        self._writable = False
        _warn_not_writable(self.root, e.strerror or str(e))
    return self._writable

  def prepare(self) -> None:
    """Removes temporary files that killed processes left behind."""
    if not self.writable:
      return
    folders = [self.splits_dir] + [e.path for e in os.scandir(self.entries_dir) if e.is_dir()]
    for folder in folders:
      for entry in os.scandir(folder):
        if entry.name.endswith(".tmp") and not files.writer_alive(entry.name):
          files.remove(entry.path)

  def read_entry(self, fingerprint: str) -> Optional[np.ndarray]:
    """The entry's samples, checked against its CRC-32; None when it is missing or damaged.

    A damaged entry is reported and removed: its file is decoded again.
    """
    path = self.entry_path(fingerprint)
    try:
      raw = np.fromfile(path, np.uint8)  # Written whole and renamed: if it exists it is complete.
    except FileNotFoundError:
      return None
    samples = cache_format.entry_samples(fingerprint, raw)
    if samples is None:
      logging.warning("audioclf: the cached entry %s fails its checksum: decoding its file "
                      "again", path)
      if self.writable:
        files.remove(path)
      return None
    _touch(path)
    return samples

  def write_entry(self, fingerprint: str, samples: np.ndarray) -> None:
    if not self.writable:
      return
    path = self.entry_path(fingerprint)
    try:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      files.atomic_write(path, *cache_format.entry_chunks(fingerprint, samples))
    except OSError as e:
      raise CacheWriteError.of(e, self.cache_dir) from e

  def write_split(self, base: str, fingerprints: Sequence[str],
                  source: Callable[[int, str], np.ndarray], marker: Optional[dict] = None) -> Split:
    """Writes a split's data, index, keys and marker (last), and drops its entries.

    Args:
      base: `split_base(fingerprints)`.
      fingerprints: each file's, in order.
      source: (row, dtype) -> that clip's samples in dtype (PCM16 or FLOAT32);
        raises NotNative when asked for int16 of a file that is not a
        canonical PCM16 WAV. A zero-length clip is a file skipped as bad.
      marker: more fields for the marker, as a split derived from another
        says what it is ("kind") and what it was made from ("source").

    Returns:
      The written split, opened.

    Raises:
      CacheWriteError: a write failed (full disk, ...): nothing of it is left behind.
    """
    try:
      return self._write_split(base, fingerprints, source, marker or {})
    except OSError as e:
      raise CacheWriteError.of(e, self.cache_dir) from e

  def _write_split(self, base: str, fingerprints: Sequence[str],
                   source: Callable[[int, str], np.ndarray], extra: dict) -> Split:
    # A split of canonical PCM16 WAVs (Speech Commands is one) keeps its int16
    # words: half the bytes of float32, exact. The first other file found
    # switches the split to float32.
    try:
      index = self._write_data(base, len(fingerprints), PCM16, source)
      dtype = PCM16
    except NotNative:
      index = self._write_data(base, len(fingerprints), FLOAT32, source)
      dtype = FLOAT32
    samples = int(index[:, 1].sum())
    try:
      for path, array in ((index_path(base), index),
                          (keys_path(base), np.array(fingerprints, "S32"))):
        files.write_with(path, functools.partial(np.save, arr=array))
      marker = {"schema": SCHEMA, "format": FORMAT, "count": len(fingerprints),
                "samples": samples, "dtype": dtype,
                "skipped": [int(r) for r in np.flatnonzero(index[:, 1] == SKIPPED_LENGTH)],
                "written": time.time(), **extra}
      # The marker goes last: until it exists, no reader trusts the files above.
      files.atomic_write(marker_path(base), json.dumps(marker).encode("utf-8"))
    except BaseException:
      for path in (data_path(base), index_path(base), keys_path(base)):
        files.remove(path)
      raise
    # Written just now from the bytes in hand: this host need not check them again.
    self.fingerprints.remember_checked(data_path(base))
    if dtype == FLOAT32:
      # The split now holds every clip its entries held: drop them rather than
      # keep the data twice. A later fill that needs one reads it from this
      # split by its key (.keys.npy); a killed fill never got here and keeps
      # its entries to resume from.
      for fp in fingerprints:
        files.remove(self.entry_path(fp))
    return Split(base, marker, index, os.stat(data_path(base)))

  def _write_data(self, base: str, count: int, dtype: str,
                  source: Callable[[int, str], np.ndarray]) -> np.ndarray:
    index = np.zeros((count, 3), np.int64)
    tmp = files.temporary_name(data_path(base))
    offset = 0
    try:
      with open(tmp, "wb") as out:
        for row in range(count):
          samples = np.ascontiguousarray(source(row, dtype), dtype)
          out.write(memoryview(samples).cast("B"))
          index[row] = offset, samples.size, cache_format.crc32(samples)
          offset += samples.size
    except BaseException:
      files.remove(tmp)  # A bad file under "fail", a full disk, a switch to float32: nothing half-written.
      raise
    os.replace(tmp, data_path(base))
    return index

  # --- Reading.

  def open(self, base: str, count: Optional[int], check_bytes: bool = True) -> Optional[Split]:
    """The complete split at `base`, checked; None when it is missing or fails a check.

    A split that fails is reported (a warning naming the check) and its
    marker removed, so it is filled again rather than served.

    Args:
      base: `split_base(...)`.
      count: how many files the split must hold; None takes its marker's word.
      check_bytes: also check each clip's CRC-32, unless this host already
        checked the data file as it is now (its stat is in the memo).
    """
    try:
      with open(marker_path(base), "rb") as f:
        raw = f.read()
    except (FileNotFoundError, NotADirectoryError):
      return None  # Not there (a --cache_dir that is a file holds nothing either).
    except OSError as e:
      return self._damaged(base, f"its marker cannot be read ({e.strerror})")
    try:
      split = check_files(base, raw, count)
      if check_bytes and not self.fingerprints.checked(split.data_path):
        bad = split.damaged_rows()
        if bad:
          raise DamagedSplitError(f"{len(bad)} of {len(split.index)} clips fail their checksums "
                                  f"(rows {bad[:5]}{' ...' if len(bad) > 5 else ''})")
        self.fingerprints.remember_checked(split.data_path)
    except DamagedSplitError as e:
      return self._damaged(base, str(e))
    _touch(marker_path(base))  # Its mtime says when the split was last used (see `prune`).
    return split

  def _damaged(self, base: str, reason: str) -> None:
    cache_format.report_damaged(base, reason, self.writable)

  def complete(self, base: str) -> bool:
    return os.path.exists(marker_path(base))

  def donors(self) -> dict[bytes, tuple[str, int]]:
    """Fingerprint -> (split base, row) over every complete split of this decode folder."""
    found = {}
    names = os.listdir(self.splits_dir) if os.path.isdir(self.splits_dir) else ()
    for name in names:
      if not name.endswith(KEYS):
        continue
      base = os.path.join(self.splits_dir, name[:-len(KEYS)])
      if not os.path.exists(marker_path(base)):
        continue  # Not complete: its data may be half-written.
      fps = cache_format.load_keys(base)
      if fps is None or not cache_format.split_keys_match(base, fps):
        continue  # Damaged: its rows may not hold the clips these keys name.
      for row, fp in enumerate(fps.tolist()):
        found[fp] = (base, row)
    return found

  def wait_for_writers(self, base: Optional[str] = None, poll_s: float = 0.01) -> None:
    """Waits while a thread of this process writes a split (`base`, or any) of this store.

    A writer names itself in its temporary file (`files.temporary_name`), so no
    registry is needed: it is done when no such file is left.
    """
    mine = f".{os.getpid()}."
    prefix = os.path.basename(base) if base else ""
    while os.path.isdir(self.splits_dir) and any(
        mine in name and name.endswith(".tmp") and name.startswith(prefix)
        for name in os.listdir(self.splits_dir)):
      time.sleep(poll_s)
