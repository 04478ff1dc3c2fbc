"""The clip cache's format: its files and names, a split as opened, and the checks it passes.

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
fingerprints in order, and the decode key hashes every decode parameter,
the format version and every decoder's name and version (`decoders.key`). A copied dataset finds its cache; an edited file gets a
new entry and its split a new key.

Opening a split (`Store.open`, `check_files`) checks the marker's schema, version and
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

import errno
import json
import os
import re
import zlib
from typing import Iterable, Optional

import numpy as np
from absl import logging

from audioclf import files
from audioclf.data import keys as keys_lib
from audioclf.data.pcm import PCM16, PCM16_SCALE

SCHEMA = "audioclf.split"
# Bump when a file format changes: the decode key changes with it, old folders are ignored.
# 5: entries end with a CRC-32 of their fingerprint and samples.
FORMAT = 5
FLOAT32 = "<f4"
DTYPES = (PCM16, FLOAT32)  # A split's samples: int16 where every file is canonical PCM16.
# A file skipped as bad under on_bad_file="skip" is a row of no samples; its examples get label -1.
SKIPPED_LENGTH = 0
# A split's files are its base (`Store.split_base`) and these suffixes; the marker is written last.
DATA, INDEX, KEYS, MARKER = ".data", ".idx.npy", ".keys.npy", ".json"
ENTRY = ".f32"  # An entry's file: entries/<kk>/<fingerprint>.f32.


def marker_path(base: str) -> str:
  """The marker of the split at `base`: the one file a reader trusts, written last."""
  return base + MARKER


def data_path(base: str) -> str:
  return base + DATA


def index_path(base: str) -> str:
  return base + INDEX


def keys_path(base: str) -> str:
  return base + KEYS


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
  data = memoryview(np.ascontiguousarray(samples, dtype=FLOAT32)).cast("B")
  return data, zlib.crc32(data, zlib.crc32(fingerprint.encode())).to_bytes(4, "little")


def entry_samples(fingerprint: str, raw: np.ndarray) -> Optional[np.ndarray]:
  """The float32 samples of an entry's bytes (uint8), or None where they fail their checksum."""
  if raw.size < 4 or raw.size % 4:
    return None
  body = raw[:-4]
  if zlib.crc32(memoryview(body), zlib.crc32(fingerprint.encode())) != int.from_bytes(
      raw[-4:].tobytes(), "little"):
    return None
  return body.view(FLOAT32)


def split_keys_match(base: str, keys: np.ndarray) -> bool:
  """Whether a split's keys (its files' fingerprints, S32) hash to its name, as they were written."""
  return keys_lib.digest("split", *(k.decode("ascii", "replace") for k in keys.tolist())) == (
      os.path.basename(base))


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
    return data_path(self.base)

  @property
  def lengths(self) -> np.ndarray:
    return self.index[:, 1]

  @property
  def kept(self) -> np.ndarray:
    """bool per row: whether its file was kept, not skipped as bad (`SKIPPED_LENGTH`)."""
    return self.lengths != SKIPPED_LENGTH

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
    if self.dtype == PCM16:
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
    if self.dtype == PCM16 and not raw:
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
    st = os.stat(data_path(base))
    size = st.st_size
    index = np.load(index_path(base), allow_pickle=False)
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
  keys = load_keys(base)
  if keys is None or keys.shape != (count,) or not split_keys_match(base, keys):
    raise DamagedSplitError("its keys (.keys.npy) are not the fingerprints its name was made of")
  return Split(base, marker, index, st)


def load_keys(base: str) -> Optional[np.ndarray]:
  try:
    keys = np.load(keys_path(base), allow_pickle=False)
  except (OSError, ValueError, EOFError):
    return None
  return keys if keys.dtype == np.dtype("S32") and keys.ndim == 1 else None


def report_damaged(base: str, reason: str, remove: bool = True) -> None:
  logging.warning("audioclf: the cached split %s is damaged (%s): it will be filled again",
                  base, reason)
  if remove:
    try:
      files.remove(marker_path(base))
    except OSError:
      pass  # A read-only cache: this process decodes instead, and says so.
