"""The persistent cache of decoded, resampled clips that every input_fn call and process shares.

Layout under `cache_dir`:

  <decode key>/                      one folder per set of decode parameters
    entries/<kk>/<key>.f32           float32 samples of one file that needed soundfile + soxr,
                                     kept only until its split is written
    splits/<split key>.data          every clip of a split, end to end (int16 where every
                                     file is a canonical PCM16 WAV, else float32)
    splits/<split key>.idx.npy       int64 [files, 2]: offset and length of each clip
    splits/<split key>.keys.npy      each clip's entry key, so later splits can take it
    splits/<split key>.json          "this split is complete" (and its dtype): written last

An entry's key hashes the file's absolute path, size and mtime, so an edited
file gets a new entry instead of a stale one; a split's key hashes those of
all its files in order, so a changed split gets new split files; the decode
key hashes every decode parameter, so a new sample rate gets a new folder.

Every file is written under a temporary name and renamed into place, so a
reader never sees half a file, and two processes filling the same cache write
identical bytes under the same names. The split's marker is renamed into place
last, so a run killed while filling leaves no marker and the next run fills
again, reusing the entries it finds: there are no locks to go stale. Once the
marker is written the split's entries are deleted (the split holds the same
clips), and a later fill reads a clip it lacks an entry for from any complete
split that holds it, so an edited file costs one decode and the disk holds
each clip once. Canonical PCM16 WAVs at the target rate need no entry: their
samples are read straight from the source when the split is written. A clip
of length zero records a file skipped under `on_bad_file="skip"`.

  python -m audioclf.cache --data_dir=data/speech_words    # pre-fill every split
  python -m audioclf.cache --data_dir=... --info           # what is cached
  python -m audioclf.cache --prune_days=30                 # delete what went unused for 30 days
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import threading
import time
from typing import Optional, Sequence

import numpy as np
from absl import logging

from audioclf import decode
from audioclf.manifest import Example
from audioclf.params import Params

CACHE_VERSION = 3  # Bump when a file format changes; old folders are then ignored.


def default_cache_dir() -> str:
  return os.environ.get("AUDIOCLF_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "audioclf")


def _digest(*parts) -> str:
  # One update over "part\0part\0...": one call per key, however many parts.
  data = "".join(f"{p}\0" for p in parts).encode("utf-8")
  return hashlib.blake2b(data, digest_size=16).hexdigest()


class ClipCache:
  """Names and writes the cache files for one set of decode parameters."""

  def __init__(self, params: Params):
    self.decode_key = _digest("v", CACHE_VERSION, "sr", params.sample_rate,
                              "q", params.resample_quality, "mono")
    self.root = os.path.join(params.cache_dir or default_cache_dir(), self.decode_key)
    self.entries_dir = os.path.join(self.root, "entries")
    self.splits_dir = os.path.join(self.root, "splits")

  def entry_key(self, example: Example) -> str:
    return _digest(example.path, example.size, example.mtime_ns)

  def entry_path(self, key: str) -> str:
    """Where the entry of the file with this `entry_key` is."""
    return os.path.join(self.entries_dir, key[:2], key + ".f32")

  def split_base(self, examples: Sequence[Example]) -> str:
    """Path prefix of a split's files; its key hashes each file's path, size and mtime, in order."""
    return os.path.join(self.splits_dir, _digest(
        "split", *(f"{e.path}\0{e.size}\0{e.mtime_ns}" for e in examples)))

  def read_marker(self, examples: Sequence[Example], base: Optional[str] = None) -> Optional[dict]:
    """The completed split's record (count, skipped paths), or None when not complete.

    `base`, when the caller already has it, saves hashing the split's key again.
    """
    base = base or self.split_base(examples)
    wait_for_fill(base)  # A fill of this process may be finishing it.
    try:
      with open(base + ".json") as f:
        marker = json.load(f)
    except (OSError, ValueError):
      return None  # Missing, or unreadable: fill again rather than trust it.
    _touch(base + ".json")  # Its mtime says when the split was last used (see `prune`).
    return marker

  def prepare(self) -> None:
    """Makes the folders, and removes temporary files that killed processes left behind."""
    os.makedirs(self.splits_dir, exist_ok=True)
    os.makedirs(self.entries_dir, exist_ok=True)
    folders = [self.splits_dir] + [e.path for e in os.scandir(self.entries_dir) if e.is_dir()]
    for folder in folders:
      for entry in os.scandir(folder):
        if entry.name.endswith(".tmp") and not _alive(entry.name):
          try:
            os.remove(entry.path)
          except FileNotFoundError:
            pass  # Another process cleaned it first.

  @staticmethod
  def write_entry(path: str, samples: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _atomic_write(path, np.ascontiguousarray(samples, dtype="<f4").tobytes())


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


def _atomic_write(path: str, data: bytes) -> None:
  tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)


class SplitReader:
  """Cuts windows out of a completed split's clips, memory-mapped.

  One call per batch copies each example's window straight from the page
  cache into the batch: no per-example file, op or dispatch. Opens lazily, so
  a dataset built before the split exists (a fill's later epochs) can hold one.
  """

  def __init__(self, base: str):
    self.base = base
    self._blob = self._index = None
    self._lock = threading.Lock()

  def _open(self):
    with self._lock:
      if self._index is None:
        wait_for_fill(self.base)
        if not os.path.exists(self.base + ".json"):
          raise RuntimeError(f"audioclf: the cache fill of {self.base} failed; see the log above")
        with open(self.base + ".json") as f:
          dtype = json.load(f).get("dtype", "<f4")
        index = np.load(self.base + ".idx.npy")
        size = os.path.getsize(self.base + ".data")
        # mmap of an empty file fails; a split of only skipped files has no samples.
        self._blob = np.memmap(self.base + ".data", dtype, "r") if size else np.zeros(0, dtype)
        self._index = index
    return self._blob, self._index

  @property
  def lengths(self) -> np.ndarray:
    return self._open()[1][:, 1]

  def clip(self, row: int) -> np.ndarray:
    """float32 samples of one clip, a copy (it outlives the memory map)."""
    blob, index = self._open()
    offset, length = index[row]
    clip = np.array(blob[offset:offset + length], np.float32)
    if blob.dtype.kind == "i":
      clip *= np.float32(1 / 32768)
    return clip

  def windows(self, rows: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """float32 [len(rows), n]: samples [start, start + n) of each clip, zero outside it."""
    blob, index = self._open()
    out = np.zeros((len(rows), n), np.float32)
    offsets, lengths = index[rows].T.tolist()  # Python ints: cheap to index with.
    for window, offset, length, start in zip(out, offsets, lengths, starts.tolist()):
      lo, hi = max(start, 0), min(start + n, length)  # The part of the clip in the window.
      if hi > lo:
        window[lo - start:hi - start] = blob[offset + lo:offset + hi]
    if blob.dtype.kind == "i":
      out *= np.float32(1 / 32768)  # PCM16 as libsndfile scales it; exact (a power of two).
    return out


class Fill:
  """One pass that fills a split: decodes files as the pipeline meets them, then writes the split.

  Its methods run on tf.data's threads (through tf.numpy_function), so shared
  state sits behind a lock. The pipeline calls `finish` from the element that
  completes its pass (or, in training, the last full batch of the first
  epoch); `finish` decodes whatever the pass has not reached yet, writes the
  split's clips end to end, and marks the split complete. A run of exactly
  one epoch of steps (files // batch size) therefore leaves a complete cache,
  though the epoch's leftover files are in no batch it trained on.
  """

  def __init__(self, cache: ClipCache, examples: Sequence[Example], params: Params,
               base: Optional[str] = None):
    self.cache, self.params = cache, params
    self.examples = list(examples)
    self.base = base or cache.split_base(self.examples)
    self._lock = threading.Lock()
    self._started = False
    self._logged: set[str] = set()
    self._inflight: dict[int, threading.Event] = {}
    self._donors: Optional[dict[bytes, tuple[str, int]]] = None  # Entry key -> (split, row).
    self._readers: dict[str, SplitReader] = {}

  def decode(self, row) -> np.ndarray:
    """The clip of the split's `row`-th file: its entry if a pass wrote one, else decoded now.

    Returns zero samples for a bad file under on_bad_file="skip".
    """
    row = int(row)
    with self._lock:
      # `finish` may reach a file the pipeline is decoding right now: wait for that instead.
      busy = self._inflight.get(row)
      if busy is None:
        self._inflight[row] = threading.Event()
    if busy is not None:
      busy.wait()
      return self.decode(row)  # Reads what the other call wrote, or fails as it did.
    try:
      return self._decode(row, self.examples[row])
    finally:
      with self._lock:
        self._inflight.pop(row).set()

  def _decode(self, row: int, example: Example) -> np.ndarray:
    key = self.cache.entry_key(example)
    path = self.cache.entry_path(key)
    try:
      samples = np.fromfile(path, "<f4")  # Written whole and renamed: if it exists it is complete.
      _touch(path)
      return samples
    except FileNotFoundError:
      pass
    samples = self._from_complete_split(row, key)
    if samples is not None:
      return samples
    try:
      samples = decode.decode_file(example.path, self.params.sample_rate,
                                   self.params.resample_quality)
    except decode.BadAudioError as e:
      if self.params.on_bad_file != "skip":
        raise
      with self._lock:
        if e.path not in self._logged:
          self._logged.add(e.path)
          logging.warning("audioclf: skipping bad audio file %s: %s", e.path, e.reason)
      samples = np.zeros(0, np.float32)
    with self._lock:
      _STATS["decoded"] += 1
    ClipCache.write_entry(path, samples)
    return samples

  def _from_complete_split(self, row: int, key: str) -> Optional[np.ndarray]:
    """The file's clip from a complete split that holds it, or None.

    A written split drops its entries (see `_write_split`): a later fill
    finds the clips there, in this very split (another process completed it)
    or in another one of the same files (an edited dataset's older split).
    """
    if os.path.exists(self.base + ".json"):
      base = self.base
    else:
      with self._lock:
        if self._donors is None:
          self._donors = _clips_by_entry_key(self.cache.splits_dir)
      base, row = self._donors.get(key.encode(), (None, None))
      if base is None:
        return None
    with self._lock:
      reader = self._readers.setdefault(base, SplitReader(base))
    try:
      return reader.clip(row)
    except (OSError, RuntimeError, ValueError):
      return None  # Pruned meanwhile, or unreadable: decode instead.

  def finish(self, background: bool = False) -> np.int64:
    """Writes the split file, its index and its marker, once per Fill.

    With `background`, the writing runs on its own thread, so training keeps
    getting batches meanwhile. The thread is no daemon: Python waits for it at
    exit, so a run that stops right after its first epoch still leaves a
    complete split. Readers in this process wait for it (`wait_for_fill`).
    Without, it returns when the split is written (an evaluation pass, whose
    caller may look at the cache next).
    """
    with self._lock:
      if self._started:
        return np.int64(0)
      self._started = True
    if not background:
      self._write_split()  # Raises for a bad file under "fail": then no marker, as it should be.
      return np.int64(0)
    thread = threading.Thread(target=self._write_split_logged, name="audioclf-cache-fill")
    with _FILLS_LOCK:
      _FILLS[self.base] = thread
    thread.start()
    return np.int64(0)

  def _write_split_logged(self) -> None:
    try:
      self._write_split()
    except BaseException as e:  # pylint: disable=broad-except
      # A bad file under "fail" also fails the pass that met it, which names
      # it to the user; this only keeps the split unmarked.
      logging.error("audioclf: the cache of this split was not written: %s", e)

  def _write_data(self, dtype: str) -> tuple[np.ndarray, list[str], int]:
    """Writes the split's samples end to end; returns (offset/length index, skipped, natives)."""
    skipped, native = [], 0
    index = np.zeros((len(self.examples), 2), np.int64)
    tmp = f"{self.base}.data.{os.getpid()}.{threading.get_ident()}.tmp"
    offset = 0
    try:
      with open(tmp, "wb") as out:
        for row, example in enumerate(self.examples):
          with open(example.path, "rb") as f:
            head = f.read(decode.HEADER_BYTES)  # One open per file: header, then samples.
            ok = decode.native_wav_header_ok(head, example.size, self.params.sample_rate)
            if ok:
              native += 1
              data = f.read()
          if dtype == "<i2":
            if not ok:
              raise _NotNative(example.path)
            count = len(data) // 2
          else:
            samples = (np.frombuffer(data, "<i2").astype(np.float32) * np.float32(1 / 32768)
                       if ok else self.decode(row))
            data, count = np.ascontiguousarray(samples, dtype).tobytes(), samples.size
          if count == 0:
            skipped.append(example.path)
          out.write(data)
          index[row] = offset, count
          offset += count
    except BaseException:
      os.remove(tmp)  # A bad file under "fail", or a switch to float32: nothing half-written.
      raise
    os.replace(tmp, self.base + ".data")
    return index, skipped, native

  def _write_split(self) -> None:
    start = time.time()
    # A split of canonical PCM16 WAVs (Speech Commands is one) keeps its int16
    # words: half the bytes of float32, copied without conversion, exact. The
    # first other file found switches the split to float32.
    try:
      index, skipped, native = self._write_data("<i2")
      dtype = "<i2"
    except _NotNative:
      index, skipped, native = self._write_data("<f4")
      dtype = "<f4"
    offset = int(index[-1].sum()) if len(index) else 0
    with self._lock:
      _STATS["decoded"] += native  # Read from source again just now.
    keys = [self.cache.entry_key(e) for e in self.examples]
    for suffix, array in ((".idx.npy", index), (".keys.npy", np.array(keys, "S32"))):
      tmp = f"{self.base}{suffix}.{os.getpid()}.{threading.get_ident()}.tmp"
      with open(tmp, "wb") as f:
        np.save(f, array)
      os.replace(tmp, self.base + suffix)
    record = {"count": len(self.examples), "samples": int(offset), "dtype": dtype,
              "skipped": sorted(skipped), "written": time.time()}
    # The marker goes last: until it exists, no reader trusts the files above.
    _atomic_write(self.base + ".json", json.dumps(record).encode("utf-8"))
    if dtype == "<f4":
      # The split now holds every clip its entries held: drop them rather than
      # keep the data twice. A later fill that needs one reads it from this
      # split by its key (.keys.npy); a killed fill never got here and keeps
      # its entries to resume from.
      for key in keys:
        try:
          os.remove(self.cache.entry_path(key))
        except FileNotFoundError:
          pass
    if skipped:
      logging.warning("audioclf: skipped %d bad files of %d", len(skipped), len(self.examples))
    logging.info("audioclf: cached %d clips (%.1f MB) in %.2fs", len(self.examples),
                 offset * np.dtype(dtype).itemsize / 1e6, time.time() - start)


def _clips_by_entry_key(splits_dir: str) -> dict[bytes, tuple[str, int]]:
  """Entry key -> (split base, row) over every complete split in `splits_dir`."""
  found = {}
  for name in (os.listdir(splits_dir) if os.path.isdir(splits_dir) else ()):
    if not name.endswith(".keys.npy"):
      continue
    base = os.path.join(splits_dir, name[:-len(".keys.npy")])
    if not os.path.exists(base + ".json"):
      continue  # Not complete: its data may be half-written.
    try:
      keys = np.load(base + ".keys.npy")
    except (OSError, ValueError):
      continue
    for row, key in enumerate(keys.tolist()):
      found[key] = (base, row)
  return found


_FILLS: dict[str, threading.Thread] = {}  # Split base -> the thread writing it, this process.
_FILLS_LOCK = threading.Lock()


def wait_for_fill(base: Optional[str] = None) -> None:
  """Waits until this process has written the split at `base` (every split when None)."""
  with _FILLS_LOCK:
    threads = list(_FILLS.values()) if base is None else [_FILLS.get(base)]
  for thread in threads:
    if thread is not None and thread is not threading.current_thread():
      thread.join()


class _NotNative(Exception):
  """A file of an int16 split turned out not to be a canonical PCM16 WAV."""


_STATS: collections.Counter = collections.Counter()


def decode_count() -> int:
  """Files this process decoded from their source (not read from the cache) so far.

  Counts soundfile decodes as they happen and canonical WAVs when a fill
  writes its split (the fill reads those from source again there).
  """
  return _STATS["decoded"]


def prefill(params: Params) -> dict[str, dict]:
  """Decodes every split into the cache now, with a progress bar; returns per-split counts.

  Training fills the cache during its first epoch anyway; this is for filling
  it ahead of time, e.g. on a data-prep machine, before many tuner trials.
  """
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  from audioclf import manifest as manifest_lib, pipeline  # pylint: disable=g-import-not-at-top

  manifest = manifest_lib.load(params)
  cache, report = ClipCache(params), {}
  for split in ("train", "validation", "test"):
    examples = manifest.split(split)
    if not examples:
      continue
    warm = cache.read_marker(examples) is not None
    decoded = decode_count()
    # One pass in evaluation order fills the split, whatever mode later reads it.
    ds = pipeline.input_fn(params.replace(batch_size=1), "eval", split=split, manifest=manifest)
    kept = sum(1 for _ in tqdm(ds, total=len(examples), desc=split, unit="file", disable=None))
    report[split] = {"files": len(examples), "kept": kept, "decoded": decode_count() - decoded,
                     "was_cached": warm}
  return report


def cache_info(params: Params) -> dict:
  """Size and completeness of the cache that `params` uses."""
  cache = ClipCache(params)
  counts = collections.Counter()
  for dirpath, _, files in os.walk(cache.root):
    for name in files:
      kind = "entries" if dirpath.startswith(cache.entries_dir) else "splits"
      counts[kind + "_bytes"] += os.path.getsize(os.path.join(dirpath, name))
      if name.endswith(".f32") and kind == "entries":
        counts["entries"] += 1
      if name.endswith(".json"):
        counts["complete_splits"] += 1
  return {"root": cache.root, **{k: counts[k] for k in
                                 ("entries", "entries_bytes", "complete_splits", "splits_bytes")}}


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
  cutoff = time.time() - days * 86400
  report = collections.Counter()

  def remove(path: str) -> None:
    try:
      size = os.path.getsize(path)
      os.remove(path)
    except FileNotFoundError:
      return  # Another process pruned it first.
    report["removed_files"] += 1
    report["freed_bytes"] += size

  def unused(path: str) -> bool:
    try:
      return os.path.getmtime(path) < cutoff
    except FileNotFoundError:
      return False  # Gone already.

  root = cache_dir or default_cache_dir()
  for folder in (os.scandir(root) if os.path.isdir(root) else ()):
    if not folder.is_dir():
      continue
    splits = os.path.join(folder.path, "splits")
    files = collections.defaultdict(list)  # Split key -> its files.
    for f in (os.scandir(splits) if os.path.isdir(splits) else ()):
      files[f.name.split(".")[0]].append(f.path)
    for key, paths in files.items():
      marker = os.path.join(splits, key + ".json")
      if marker in paths:
        if not unused(marker):
          report["kept_splits"] += 1
          continue
        paths = [marker] + sorted(set(paths) - {marker})
      for path in paths:
        if path == marker or unused(path):
          remove(path)
    for dirpath, _, names in os.walk(os.path.join(folder.path, "entries")):
      for name in names:
        path = os.path.join(dirpath, name)
        if unused(path):
          remove(path)
  return {k: report[k] for k in ("removed_files", "freed_bytes", "kept_splits")}


def main(argv: Sequence[str]) -> None:
  from absl import flags  # pylint: disable=g-import-not-at-top
  from audioclf import cli  # pylint: disable=g-import-not-at-top
  del argv
  params = cli.params_from_flags()
  if flags.FLAGS.info:
    print(json.dumps(cache_info(params)))
    return
  if flags.FLAGS.prune_days is not None:
    print(json.dumps(prune(params.cache_dir, flags.FLAGS.prune_days)))
    return
  start = time.time()
  report = prefill(params)
  print(json.dumps({"seconds": round(time.time() - start, 2), **report, **cache_info(params)}))


def run() -> None:
  from absl import flags  # pylint: disable=g-import-not-at-top
  from audioclf import cli  # pylint: disable=g-import-not-at-top
  cli.define_flags()
  flags.DEFINE_bool("info", False, "Print what is cached instead of filling it.")
  flags.DEFINE_float("prune_days", None, "Instead of filling, delete the splits and entries "
                     "of every dataset under --cache_dir that no run has used for this many days.")
  cli.run(main)


if __name__ == "__main__":
  # `python -m audioclf.cache` runs this file as __main__, a second copy of the
  # module: hand over to the one the pipeline imports, whose decode counter
  # and fill threads are the ones that move.
  from audioclf import cache as _cache  # pylint: disable=g-import-not-at-top
  _cache.run()
