"""The on-disk cache of decoded clips: its format, its names, and the checks a split passes before it is read.

Layout under `cache_dir` (numpy only; no TensorFlow):

  <decode key>/                      one folder per set of decode parameters
    entries/<kk>/<fingerprint>.f32   float32 samples of one file that needed soundfile + soxr,
                                     then the CRC-32 of its fingerprint and samples (4 bytes);
                                     kept only until its split is written
    splits/<split key>.data          every clip of a split, end to end (int16 where every
                                     file is a canonical PCM16 WAV, else float32)
    splits/<split key>.idx.npy       int64 [files, 3]: offset, length and CRC-32 of each clip
    splits/<split key>.keys.npy      each clip's content fingerprint, so later splits can take it;
                                     they hash to the split key, which checks them
    splits/<split key>.json          the marker: schema, format version, dtype, counts. Last.

Keys are content, not places: an entry's key is its file's content
fingerprint (`keys.Fingerprints`), a split's key hashes its files'
fingerprints in order, and the decode key hashes every decode parameter and
the format version. A copied dataset finds its cache; an edited file gets a
new entry and its split a new key.

Every file is written under a temporary name and renamed into place, and a
failed write (a full disk) removes its temporary file: a reader never sees
half a file, two processes filling the same cache write identical bytes under
the same names, and the marker, renamed into place last, is the only thing a
reader trusts. A run killed while filling leaves no marker, and the next run
fills again, reusing the entries it finds: no locks to go stale.

Opening a split (`Store.open`) checks the marker's schema, version and
dtype, the sizes of the data and index files, the index itself (clips end
to end, lengths summing to the data) and the keys (they hash to the split's
name); then each clip's CRC-32, unless this host already checked these very
bytes (`Fingerprints.checked`: the data file's stat is unchanged since it
was written or last checked). A split that fails is reported, its marker
removed, and it is filled again: it is never served. An entry is checked
against its CRC-32 each time it is read; one that fails is reported, removed
and decoded again. Nothing is copied into a split that was not checked: its
clips come from checked entries, checked splits or the source files. `verify`
checks every byte of every split and entry whatever the memo says.
"""

from __future__ import annotations

import collections
import errno
import functools
import json
import os
import re
import threading
import time
import zlib
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
from absl import logging

from audioclf.data import keys as keys_lib

SCHEMA = "audioclf.split"
# Bump when a file format changes: the decode key changes with it, old folders are ignored.
# 5: entries end with a CRC-32 of their fingerprint and samples.
FORMAT = 5
PCM16, FLOAT32 = "<i2", "<f4"  # A split's samples: int16 where every file is canonical PCM16.
DTYPES = (PCM16, FLOAT32)
# A file skipped as bad under on_bad_file="skip" is a row of no samples; its examples get label -1.
SKIPPED_LENGTH = 0
PCM16_SCALE = np.float32(1 / 32768)  # As libsndfile scales PCM16; exact (a power of two).


class DamagedSplitError(Exception):
  """A split whose files do not agree with their marker, or whose bytes fail their checksums."""


class NotNative(Exception):
  """A file of an int16 split turned out not to be a canonical PCM16 WAV."""


class CacheWriteError(OSError):
  """A cache file could not be written (a full disk, a quota, a failing device): says where.

  Its text is what a user reads, one line; it survives TensorFlow's wrapping
  when raised inside the pipeline (`from_text` reads it back).
  """

  def __init__(self, message: str, errno_: Optional[int] = None):
    super().__init__(errno_, message)

  def __str__(self) -> str:
    return self.strerror

  @classmethod
  def of(cls, error: OSError, cache_dir: str) -> "CacheWriteError":
    """`error`, raised while writing under `cache_dir`, as a CacheWriteError naming that folder."""
    if isinstance(error, cls):
      return error
    advice = ("free space there, or point --cache_dir at another disk"
              if error.errno in (errno.ENOSPC, errno.EDQUOT) else "point --cache_dir elsewhere")
    return cls(f"audioclf: cannot write the cache in {cache_dir}: "
               f"{error.strerror or error} ({advice})", error.errno)

  @classmethod
  def from_text(cls, text: str) -> Optional["CacheWriteError"]:
    """The first CacheWriteError whose text `text` holds (a TensorFlow error's message), or None."""
    match = _CACHE_WRITE_ERROR.search(text)
    return cls(match.group(0)) if match else None


_CACHE_WRITE_ERROR = re.compile(r"audioclf: cannot write the cache in .*")


def crc32(samples: np.ndarray) -> int:
  return zlib.crc32(memoryview(np.ascontiguousarray(samples)).cast("B"))


def entry_chunks(fingerprint: str, samples: np.ndarray) -> tuple[memoryview, bytes]:
  """An entry file's contents: float32 samples, then the CRC-32 of the fingerprint and them.

  The fingerprint is in the checksum so that an entry under another file's
  name fails it too. The samples come as a view of `samples` (float32 from
  the decoder: no copy), checked and written as they are.
  """
  data = memoryview(np.ascontiguousarray(samples, dtype="<f4")).cast("B")
  return data, zlib.crc32(data, zlib.crc32(fingerprint.encode())).to_bytes(4, "little")


def entry_samples(fingerprint: str, raw: np.ndarray) -> Optional[np.ndarray]:
  """The float32 samples of an entry's bytes (uint8), or None where they fail their checksum."""
  if raw.size < 4 or raw.size % 4:
    return None
  body = raw[:-4]
  if zlib.crc32(memoryview(body), zlib.crc32(fingerprint.encode())) != int.from_bytes(
      raw[-4:].tobytes(), "little"):
    return None
  return body.view("<f4")


def split_keys_match(base: str, keys: np.ndarray) -> bool:
  """Whether a split's keys (its files' fingerprints, S32) hash to its name, as they were written."""
  return keys_lib.digest("split", *(k.decode("ascii", "replace") for k in keys.tolist())) == (
      os.path.basename(base))


def atomic_write(path: str, *chunks: bytes) -> None:
  """Writes `path` (`chunks`, end to end) whole or not at all: a temporary file, renamed into place.

  A failed write removes its temporary file.
  """
  tmp = temporary_name(path)
  try:
    with open(tmp, "wb") as f:
      for chunk in chunks:
        f.write(chunk)
    os.replace(tmp, path)
  except BaseException:
    _remove(tmp)
    raise


def temporary_name(path: str) -> str:
  """`<path>.<pid>.<thread>.tmp`: names its writer, so a later run removes it only once that died."""
  return f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"


def _remove(path: str) -> None:
  try:
    os.remove(path)
  except FileNotFoundError:
    pass


def _alive(tmp_name: str) -> bool:
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


def _touch(path: str) -> None:
  """Marks a cache file as just used; a read-only cache stays as it is."""
  try:
    os.utime(path)
  except OSError:
    pass


class Split:
  """An opened, checked split: its index, and its samples memory-mapped (numpy)."""

  def __init__(self, base: str, marker: dict, index: np.ndarray, data_stat: os.stat_result):
    self.base, self.marker, self.index = base, marker, index
    self.dtype = marker["dtype"]
    self.samples = int(marker["samples"])
    self.skipped = list(marker.get("skipped", ()))
    self._blob = None
    # The data file as opened (device, inode, size, mtime, ctime): a split
    # filled again under the same key is another file.
    self.identity = (data_stat.st_dev, data_stat.st_ino, data_stat.st_size,
                     data_stat.st_mtime_ns, data_stat.st_ctime_ns)

  @property
  def data_path(self) -> str:
    return self.base + ".data"

  @property
  def lengths(self) -> np.ndarray:
    return self.index[:, 1]

  @property
  def offsets(self) -> np.ndarray:
    return self.index[:, 0]

  @property
  def blob(self) -> np.ndarray:
    if self._blob is None:
      # mmap of an empty file fails; a split of only skipped files has no samples.
      self._blob = (np.memmap(self.data_path, self.dtype, "r") if self.samples
                    else np.zeros(0, self.dtype))
    return self._blob

  def raw(self, row: int) -> np.ndarray:
    offset, length = int(self.index[row, 0]), int(self.index[row, 1])
    return self.blob[offset:offset + length]

  def clip(self, row: int) -> np.ndarray:
    """float32 samples of one clip, a copy (it outlives the map), checked against its CRC.

    Raises:
      DamagedSplitError: the clip's bytes fail their checksum.
    """
    raw = self.raw(row)
    if crc32(raw) != int(self.index[row, 2]):
      raise DamagedSplitError(f"clip {row} of {self.base} fails its checksum")
    clip = np.array(raw, np.float32)
    if self.dtype == "<i2":
      clip *= PCM16_SCALE
    return clip

  def damaged_rows(self, rows: Optional[Iterable[int]] = None) -> list[int]:
    """The rows (all by default) whose bytes fail their CRC-32: reads every byte of them."""
    rows = range(len(self.index)) if rows is None else rows
    return [r for r in rows if crc32(self.raw(r)) != int(self.index[r, 2])]

  def windows(self, rows: np.ndarray, starts: np.ndarray, n: int, raw: bool = False) -> np.ndarray:
    """float32 [len(rows), n]: samples [start, start + n) of each clip, zero outside it.

    The numpy twin of `window.cut` (one call per batch), for the warm cut and
    the continuation of a cold run, whose split did not exist when its graph
    was built. The same copy and the same scale: the same bits. `raw`: in the split's own dtype, unscaled
    (int16 for PCM16: half the bytes, and a copy with no conversion).
    """
    # Plain ndarray slices: a np.memmap's cost about twice as much (its subclass hooks).
    blob = self.blob.view(np.ndarray)
    offsets, lengths = self.index[rows, :2].T.tolist()  # Python ints: cheap to index with.
    out = cut_windows((blob[o:o + length] for o, length in zip(offsets, lengths)), starts, n,
                      blob.dtype if raw else np.float32)
    if self.dtype == "<i2" and not raw:
      out *= PCM16_SCALE
    return out


def cut_windows(clips: Iterable[np.ndarray], starts: np.ndarray, n: int,
                dtype=np.float32) -> np.ndarray:
  """[len(starts), n] of `dtype`: samples [start, start + n) of each clip, zero outside it."""
  out = np.zeros((len(starts), n), dtype)
  for window, clip, start in zip(out, clips, np.asarray(starts).tolist()):
    lo, hi = max(start, 0), min(start + n, len(clip))  # The part of the clip in the window.
    if hi > lo:
      window[lo - start:hi - start] = clip[lo:hi]
  return out


def check_files(base: str, raw: bytes, count: Optional[int]) -> Split:
  """The split if its marker (`raw`), sizes and index agree; else DamagedSplitError saying which.

  `count`: the files the split must hold; None takes the marker's word.
  """
  try:
    marker = json.loads(raw)
  except ValueError as e:
    raise DamagedSplitError(f"its marker is not JSON ({e})") from e
  if not isinstance(marker, dict) or marker.get("schema") != SCHEMA:
    raise DamagedSplitError("its marker is not an audioclf split marker")
  if marker.get("format") != FORMAT:
    raise DamagedSplitError(f"format {marker.get('format')!r}, this audioclf reads {FORMAT}")
  if marker.get("dtype") not in DTYPES:
    raise DamagedSplitError(f"unknown dtype {marker.get('dtype')!r}")
  samples = marker.get("samples")
  count = marker.get("count") if count is None else count
  if (not isinstance(count, int) or marker.get("count") != count
      or not isinstance(samples, int) or samples < 0):
    raise DamagedSplitError(f"its marker says {marker.get('count')!r} clips, "
                            f"{samples!r} samples; the split has {count} files")
  try:
    st = os.stat(base + ".data")
    size = st.st_size
    index = np.load(base + ".idx.npy", allow_pickle=False)
  except (OSError, ValueError, EOFError) as e:
    raise DamagedSplitError(f"its data or index cannot be read ({e})") from e
  itemsize = np.dtype(marker["dtype"]).itemsize
  if size != samples * itemsize:
    raise DamagedSplitError(f"its data holds {size} bytes, its marker says "
                            f"{samples * itemsize}")
  if index.dtype != np.int64 or index.shape != (count, 3):
    raise DamagedSplitError(f"its index is {index.dtype} {index.shape}, want int64 ({count}, 3)")
  offsets, lengths = index[:, 0], index[:, 1]
  if count and (offsets[0] != 0 or (lengths < 0).any()
                or (offsets[1:] != offsets[:-1] + lengths[:-1]).any()
                or offsets[-1] + lengths[-1] != samples):
    raise DamagedSplitError("its index does not lay the clips end to end over its data")
  keys = _load_keys(base)
  if keys is None or keys.shape != (count,) or not split_keys_match(base, keys):
    raise DamagedSplitError("its keys (.keys.npy) are not the fingerprints its name was made of")
  return Split(base, marker, index, st)


def _load_keys(base: str) -> Optional[np.ndarray]:
  try:
    keys = np.load(base + ".keys.npy", allow_pickle=False)
  except (OSError, ValueError, EOFError):
    return None
  return keys if keys.dtype == np.dtype("S32") and keys.ndim == 1 else None


def _report_damaged(base: str, reason: str, remove: bool = True) -> None:
  logging.warning("audioclf: the cached split %s is damaged (%s): it will be filled again",
                  base, reason)
  if remove:
    try:
      _remove(base + ".json")
    except OSError:
      pass  # A read-only cache: this process decodes instead, and says so.


@functools.cache
def _warn_not_writable(root: str, reason: str) -> None:
  # Once per folder and process: every input_fn call of a run would say it again.
  logging.warning("audioclf: the cache folder %s cannot be written (%s): decoding without "
                  "caching", root, reason)


class Store:
  """Names, writes, checks and opens the cache files of one set of decode parameters."""

  def __init__(self, cache_dir: Optional[str], sample_rate: int, resample_quality: str,
               fingerprints: Optional[keys_lib.Fingerprints] = None):
    self.decode_key = keys_lib.digest("decode", FORMAT, "sr", sample_rate, "q", resample_quality,
                                      "mono")
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
    return os.path.join(self.entries_dir, fingerprint[:2], fingerprint + ".f32")

  # --- Writing.

  @property
  def writable(self) -> bool:
    """Whether this process can write the cache: else it decodes without caching (one warning)."""
    if self._writable is None:
      try:
        os.makedirs(self.splits_dir, exist_ok=True)
        os.makedirs(self.entries_dir, exist_ok=True)
        probe = temporary_name(os.path.join(self.splits_dir, "write-probe"))
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
        if entry.name.endswith(".tmp") and not _alive(entry.name):
          _remove(entry.path)

  def read_entry(self, fingerprint: str) -> Optional[np.ndarray]:
    """The entry's samples, checked against its CRC-32; None when it is missing or damaged.

    A damaged entry is reported and removed: its file is decoded again.
    """
    path = self.entry_path(fingerprint)
    try:
      raw = np.fromfile(path, np.uint8)  # Written whole and renamed: if it exists it is complete.
    except FileNotFoundError:
      return None
    samples = entry_samples(fingerprint, raw)
    if samples is None:
      logging.warning("audioclf: the cached entry %s fails its checksum: decoding its file "
                      "again", path)
      if self.writable:
        _remove(path)
      return None
    _touch(path)
    return samples

  def write_entry(self, fingerprint: str, samples: np.ndarray) -> None:
    if not self.writable:
      return
    path = self.entry_path(fingerprint)
    try:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      atomic_write(path, *entry_chunks(fingerprint, samples))
    except OSError as e:
      raise CacheWriteError.of(e, self.cache_dir) from e

  def write_split(self, base: str, fingerprints: Sequence[str],
                  source: Callable[[int, str], np.ndarray]) -> Split:
    """Writes a split's data, index, keys and marker (last), and drops its entries.

    Args:
      base: `split_base(fingerprints)`.
      fingerprints: each file's, in order.
      source: (row, dtype) -> that clip's samples in dtype ("<i2" or "<f4");
        raises NotNative when asked for int16 of a file that is not a
        canonical PCM16 WAV. A zero-length clip is a file skipped as bad.

    Returns:
      The written split, opened.

    Raises:
      CacheWriteError: a write failed (full disk, ...): nothing of it is left behind.
    """
    try:
      return self._write_split(base, fingerprints, source)
    except OSError as e:
      raise CacheWriteError.of(e, self.cache_dir) from e

  def _write_split(self, base: str, fingerprints: Sequence[str],
                   source: Callable[[int, str], np.ndarray]) -> Split:
    # A split of canonical PCM16 WAVs (Speech Commands is one) keeps its int16
    # words: half the bytes of float32, exact. The first other file found
    # switches the split to float32.
    try:
      index = self._write_data(base, len(fingerprints), "<i2", source)
      dtype = "<i2"
    except NotNative:
      index = self._write_data(base, len(fingerprints), "<f4", source)
      dtype = "<f4"
    samples = int(index[:, 1].sum())
    try:
      for suffix, array in ((".idx.npy", index), (".keys.npy", np.array(fingerprints, "S32"))):
        tmp = temporary_name(base + suffix)
        try:
          with open(tmp, "wb") as f:
            np.save(f, array)
        except BaseException:
          _remove(tmp)
          raise
        os.replace(tmp, base + suffix)
      marker = {"schema": SCHEMA, "format": FORMAT, "count": len(fingerprints),
                "samples": samples, "dtype": dtype,
                "skipped": [int(r) for r in np.flatnonzero(index[:, 1] == 0)],
                "written": time.time()}
      # The marker goes last: until it exists, no reader trusts the files above.
      atomic_write(base + ".json", json.dumps(marker).encode("utf-8"))
    except BaseException:
      for suffix in (".data", ".idx.npy", ".keys.npy"):
        _remove(base + suffix)
      raise
    # Written just now from the bytes in hand: this host need not check them again.
    self.fingerprints.remember_checked(base + ".data")
    if dtype == "<f4":
      # The split now holds every clip its entries held: drop them rather than
      # keep the data twice. A later fill that needs one reads it from this
      # split by its key (.keys.npy); a killed fill never got here and keeps
      # its entries to resume from.
      for fp in fingerprints:
        _remove(self.entry_path(fp))
    return Split(base, marker, index, os.stat(base + ".data"))

  def _write_data(self, base: str, count: int, dtype: str,
                  source: Callable[[int, str], np.ndarray]) -> np.ndarray:
    index = np.zeros((count, 3), np.int64)
    tmp = temporary_name(base + ".data")
    offset = 0
    try:
      with open(tmp, "wb") as out:
        for row in range(count):
          samples = np.ascontiguousarray(source(row, dtype), dtype)
          out.write(memoryview(samples).cast("B"))
          index[row] = offset, samples.size, crc32(samples)
          offset += samples.size
    except BaseException:
      _remove(tmp)  # A bad file under "fail", a full disk, a switch to float32: nothing half-written.
      raise
    os.replace(tmp, base + ".data")
    return index

  # --- Reading.

  def marker_path(self, base: str) -> str:
    return base + ".json"

  def open(self, base: str, count: int, check_bytes: bool = True) -> Optional[Split]:
    """The complete split at `base`, checked; None when it is missing or fails a check.

    A split that fails is reported (a warning naming the check) and its
    marker removed, so it is filled again rather than served.

    Args:
      base: `split_base(...)`.
      count: how many files the split must hold.
      check_bytes: also check each clip's CRC-32, unless this host already
        checked the data file as it is now (its stat is in the memo).
    """
    try:
      with open(base + ".json", "rb") as f:
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
          raise DamagedSplitError(f"{len(bad)} of {count} clips fail their checksums "
                                  f"(rows {bad[:5]}{' ...' if len(bad) > 5 else ''})")
        self.fingerprints.remember_checked(split.data_path)
    except DamagedSplitError as e:
      return self._damaged(base, str(e))
    _touch(base + ".json")  # Its mtime says when the split was last used (see `prune`).
    return split

  def _damaged(self, base: str, reason: str) -> None:
    _report_damaged(base, reason, self.writable)

  def complete(self, base: str) -> bool:
    return os.path.exists(base + ".json")

  def donors(self) -> dict[bytes, tuple[str, int]]:
    """Fingerprint -> (split base, row) over every complete split of this decode folder."""
    found = {}
    names = os.listdir(self.splits_dir) if os.path.isdir(self.splits_dir) else ()
    for name in names:
      if not name.endswith(".keys.npy"):
        continue
      base = os.path.join(self.splits_dir, name[:-len(".keys.npy")])
      if not os.path.exists(base + ".json"):
        continue  # Not complete: its data may be half-written.
      fps = _load_keys(base)
      if fps is None or not split_keys_match(base, fps):
        continue  # Damaged: its rows may not hold the clips these keys name.
      for row, fp in enumerate(fps.tolist()):
        found[fp] = (base, row)
    return found

  def wait_for_writers(self, base: Optional[str] = None, poll_s: float = 0.01) -> None:
    """Waits while a thread of this process writes a split (`base`, or any) of this store.

    A writer names itself in its temporary file (`temporary_name`), so no
    registry is needed: it is done when no such file is left.
    """
    mine = f".{os.getpid()}."
    prefix = os.path.basename(base) if base else ""
    while os.path.isdir(self.splits_dir) and any(
        mine in name and name.endswith(".tmp") and name.startswith(prefix)
        for name in os.listdir(self.splits_dir)):
      time.sleep(poll_s)


# --- Maintenance: what python -m audioclf cache --info / --prune_days / --verify do.


def info(store: Store) -> dict:
  """Size and completeness of one decode folder."""
  counts = collections.Counter()
  for dirpath, _, files in os.walk(store.root):
    for name in files:
      kind = "entries" if dirpath.startswith(store.entries_dir) else "splits"
      try:
        counts[kind + "_bytes"] += os.path.getsize(os.path.join(dirpath, name))
      except FileNotFoundError:
        continue
      if name.endswith(".f32") and kind == "entries":
        counts["entries"] += 1
      if name.endswith(".json"):
        counts["complete_splits"] += 1
  return {"root": store.root, **{k: counts[k] for k in
                                 ("entries", "entries_bytes", "complete_splits", "splits_bytes")}}


def verify(cache_dir: Optional[str]) -> dict:
  """Checks every byte of every complete split and every entry under `cache_dir`.

  A damaged split loses its marker and a damaged entry its file: the next
  run fills them again. A folder that another format version wrote (its
  markers say so) is left as it is: this audioclf never reads it, and
  `prune` removes it once unused.

  Returns:
    {"splits": n, "damaged": [split base, ...], "entries": n,
     "damaged_entries": [entry path, ...], "other_formats": [folder, ...], "bytes": n,
     "seconds": s}.
  """
  root = cache_dir or keys_lib.default_cache_dir()
  report = {"splits": 0, "damaged": [], "entries": 0, "damaged_entries": [],
            "other_formats": [], "bytes": 0}
  fingerprints = keys_lib.Fingerprints()
  start = time.perf_counter()
  for folder in (os.scandir(root) if os.path.isdir(root) else ()):
    if not folder.is_dir():
      continue
    splits = os.path.join(folder.path, "splits")
    if _format_of(splits) not in (None, FORMAT):
      report["other_formats"].append(folder.path)
      continue
    _verify_splits(splits, report, fingerprints)
    _verify_entries(os.path.join(folder.path, "entries"), report)
  report["seconds"] = round(time.perf_counter() - start, 3)
  return report


def _format_of(splits: str) -> Optional[int]:
  """The format version a decode folder's markers give (one per folder: it is in the key)."""
  for name in sorted(os.listdir(splits)) if os.path.isdir(splits) else ():
    if name.endswith(".json"):
      try:
        with open(os.path.join(splits, name), "rb") as f:
          marker = json.loads(f.read())
      except (OSError, ValueError):
        continue  # Damaged: the check of its split says so.
      if isinstance(marker, dict) and marker.get("schema") == SCHEMA:
        return marker.get("format")
  return None


def _verify_splits(splits: str, report: dict, fingerprints: keys_lib.Fingerprints) -> None:
  for name in sorted(os.listdir(splits)) if os.path.isdir(splits) else ():
    if not name.endswith(".json"):
      continue
    base = os.path.join(splits, name[:-len(".json")])
    report["splits"] += 1
    try:
      with open(base + ".json", "rb") as f:
        split = check_files(base, f.read(), None)  # Marker, sizes, index and keys.
      bad = split.damaged_rows()
      if bad:
        raise DamagedSplitError(f"{len(bad)} clips fail their checksums (rows {bad[:5]})")
      fingerprints.remember_checked(split.data_path)
      report["bytes"] += split.samples * np.dtype(split.dtype).itemsize
    except (DamagedSplitError, OSError) as e:
      report["damaged"].append(base)
      _report_damaged(base, str(e))


def _verify_entries(entries: str, report: dict) -> None:
  for dirpath, _, names in os.walk(entries):
    for name in sorted(names):
      if not name.endswith(".f32"):
        continue  # A writer's temporary file: not trusted by anyone yet.
      path = os.path.join(dirpath, name)
      try:
        raw = np.fromfile(path, np.uint8)
      except FileNotFoundError:
        continue  # Its split was written meanwhile, which dropped it.
      except OSError as e:
        raw, reason = None, f"it cannot be read ({e.strerror})"
      else:
        reason = "it fails its checksum"
      report["entries"] += 1
      if raw is not None and entry_samples(name[:-len(".f32")], raw) is not None:
        report["bytes"] += raw.size
        continue
      report["damaged_entries"].append(path)
      logging.warning("audioclf: the cached entry %s is damaged (%s): it is removed, and its "
                      "file will be decoded again", path, reason)
      try:
        _remove(path)
      except OSError:
        pass  # A read-only cache: reported, and every reader checks it anyway.


def prune(cache_dir: Optional[str], days: float) -> dict:
  """Deletes what no run has used for `days` days, under every decode folder of `cache_dir`.

  A split goes when its marker was last read (every input_fn call that finds
  it touches it) before the cut-off: marker first, so no reader trusts a
  half-deleted split, then its data and index. Entries go when last read or
  written before it; so do a killed fill's leftovers (split files with no
  marker, temporary files). What a running fill writes is newer than any
  cut-off, and a process that has a split memory-mapped keeps reading it.

  Returns:
    {"removed_files": n, "freed_bytes": n, "kept_splits": n}.
  """
  if days < 0:
    raise ValueError(f"prune days must be >= 0, got {days}")
  pruner = _Pruner(cutoff=time.time() - days * 86400)
  root = cache_dir or keys_lib.default_cache_dir()
  for folder in (os.scandir(root) if os.path.isdir(root) else ()):
    if folder.is_dir():
      pruner.splits(os.path.join(folder.path, "splits"))
      pruner.entries(os.path.join(folder.path, "entries"))
  return {k: pruner.report[k] for k in ("removed_files", "freed_bytes", "kept_splits")}


class _Pruner:
  """Removes the cache files of one decode folder last used before `cutoff`, counting them."""

  def __init__(self, cutoff: float):
    self.cutoff = cutoff
    self.report = collections.Counter()

  def splits(self, splits_dir: str) -> None:
    """Each split whose marker is unused goes, marker first; files with no marker go when unused."""
    files = collections.defaultdict(list)  # Split key -> its files.
    for f in (os.scandir(splits_dir) if os.path.isdir(splits_dir) else ()):
      files[f.name.split(".")[0]].append(f.path)
    for key, paths in files.items():
      marker = os.path.join(splits_dir, key + ".json")
      if marker in paths:
        if not self._unused(marker):
          self.report["kept_splits"] += 1
          continue
        paths = [marker] + sorted(set(paths) - {marker})
      for path in paths:
        if path == marker or self._unused(path):
          self._remove(path)

  def entries(self, entries_dir: str) -> None:
    for dirpath, _, names in os.walk(entries_dir):
      for name in names:
        path = os.path.join(dirpath, name)
        if self._unused(path):
          self._remove(path)

  def _remove(self, path: str) -> None:
    try:
      size = os.path.getsize(path)
      os.remove(path)
    except FileNotFoundError:
      return  # Another process pruned it first.
    self.report["removed_files"] += 1
    self.report["freed_bytes"] += size

  def _unused(self, path: str) -> bool:
    try:
      return os.path.getmtime(path) < self.cutoff
    except FileNotFoundError:
      return False  # Gone already.
