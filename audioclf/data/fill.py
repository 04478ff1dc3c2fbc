"""Filling a split of the cache: each file decoded once, then the split written end to end.

A `Fill` belongs to whoever reads the split first: the cold pipeline (its
methods then run on tf.data's threads, through tf.numpy_function) or `fill()`
(a thread pool, for the cache command, the tuner and the benchmarks). It
decodes files as they are asked for, and `finish` decodes whatever is left,
writes the split (`store.Store.write_split`) and marks it complete. All of
its state is its own: nothing here outlives the objects its caller holds,
and the count of its decodes goes to the `Decodes` its caller hands it.

  python -m audioclf cache --flagfile=...   # fill() every split, with a progress bar
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from typing import Optional, Sequence

import numpy as np
from absl import logging

from audioclf.data import cache_format, decode
from audioclf.data import manifest as manifest_lib
from audioclf.data import store as store_lib
from audioclf.data.decoders import pcm16_wav
from audioclf.data.manifest import Example, Manifest
from audioclf.params import SPLITS, Params


class Decodes:
  """A count of files decoded from their source (not read from the cache): a metric, shared by threads.

  Counts decodes as they happen, and canonical WAVs when a fill writes its
  split (it reads those from source again there). No decision depends on it.
  """

  def __init__(self):
    self._lock = threading.Lock()
    self._count = 0

  def add(self, n: int = 1) -> None:
    with self._lock:
      self._count += n

  @property
  def count(self) -> int:
    return self._count


class Fill:
  """One pass that fills a split: decodes files as they are asked for, then writes the split."""

  def __init__(self, store: store_lib.Store, examples: Sequence[Example],
               fingerprints: Sequence[str], params: Params, base: Optional[str] = None,
               decodes: Optional[Decodes] = None):
    self.store, self.params = store, params
    self.decodes = decodes or Decodes()  # The caller's count, where it keeps one.
    self.examples, self.fingerprints = list(examples), list(fingerprints)
    self.base = base or store.split_base(self.fingerprints)
    self.split: Optional[cache_format.Split] = None
    self.error: Optional[BaseException] = None
    self._lock = threading.Lock()
    self._started = False
    self.filled = False  # Whether fill_now ran.
    self._thread: Optional[threading.Thread] = None
    self._written = threading.Event()  # Set once the writer thread wrote the split, or failed.
    # Set once a cache write error reached the run (from `wait`, or an entry's write).
    self._error_told = threading.Event()
    self._logged: set[str] = set()
    self._inflight: dict[int, threading.Event] = {}
    # Rows this fill decoded (or read back) already: their lengths in samples.
    self._decoded: dict[int, int] = {}
    self._donors: Optional[dict[bytes, tuple[str, int]]] = None  # Fingerprint -> (split, row).
    self._opened: dict[str, Optional[cache_format.Split]] = {}

  # --- Decoding, one file at a time (tf.data's threads call this through numpy_function).

  def decode(self, row) -> np.ndarray:
    """float32 samples of the split's `row`-th file: its entry, a complete split's copy, or decoded.

    Returns zero samples for a bad file under on_bad_file="skip".

    Raises:
      decode.BadAudioError: a bad file under on_bad_file="fail".
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
      samples = self._decode(row)
      with self._lock:
        self._decoded[row] = len(samples)
      return samples
    finally:
      with self._lock:
        self._inflight.pop(row).set()

  def _decode(self, row: int) -> np.ndarray:
    fp = self.fingerprints[row]
    samples = self.store.read_entry(fp)
    if samples is not None:
      return samples
    samples = self._from_complete_split(row, fp)
    if samples is not None:
      return samples
    example = self.examples[row]
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
    self.decodes.add()
    try:
      self.store.write_entry(fp, samples)
    except cache_format.CacheWriteError:
      self._error_told.set()  # The run ends on it: a split writer failing too need not repeat it.
      raise
    return samples

  def _from_complete_split(self, row: int, fp: str) -> Optional[np.ndarray]:
    """The file's clip from a complete split that holds it (checked), or None.

    A written split drops its entries: a later fill finds the clips there, in
    this very split (another process completed it) or in another one of the
    same files (an edited dataset's older split).
    """
    if self.store.complete(self.base):
      base = self.base
    else:
      with self._lock:
        if self._donors is None:
          self._donors = self.store.donors()
      base, row = self._donors.get(fp.encode(), (None, None))
      if base is None:
        return None
    with self._lock:
      if base not in self._opened:
        count = len(self.examples) if base == self.base else None
        # Each clip taken is checked against its CRC: the whole split need not be first.
        # None: pruned meanwhile, or damaged (reported): decode instead.
        self._opened[base] = self.store.open(base, count, check_bytes=False)
      split = self._opened[base]
    if split is None:
      return None
    try:
      return split.clip(row)  # Checked against the clip's CRC: a damaged copy is not taken.
    except (OSError, ValueError, cache_format.DamagedSplitError):
      return None

  # --- Writing the split.

  def finish(self, background: bool = False, pending: Sequence[int] = ()) -> np.int64:
    """Decodes what is left and writes the split file, its index and marker, once per Fill.

    With `background`, the writing runs on its own thread, so training keeps
    getting batches meanwhile. The thread is no daemon: Python waits for it at
    exit, so a run that stops right after its first epoch still leaves a
    complete split. Without, it returns when the split is written (an
    evaluation pass, whose caller may look at the cache next).

    `pending`: rows the pass will reach only after this call (in batches a
    short run may never take). Under on_bad_file="fail" they are decoded
    here (on a thread pool: the pass's other calls wait for these rows), in
    the element that asked: a bad one fails the run that met it rather than
    only the writer thread, whose error no one would see.
    """
    with self._lock:
      if self._started:
        return np.int64(0)
      self._started = True
    if not self.store.writable:
      return np.int64(0)
    try:
      if not background:
        self._write()  # Raises for a bad file under "fail": then no marker, as it should be.
        return np.int64(0)
      if self.params.on_bad_file == "fail":
        self._decode_all(sorted(set(int(r) for r in pending)))
    except BaseException as e:
      self.error = e  # Later batches that need the split say why there is none.
      raise
    # daemon=False said outright: a thread started from a tf.data thread (this
    # call's, through numpy_function) would inherit daemon=True from it.
    self._thread = threading.Thread(target=self._write_logged, name="audioclf-cache-fill",
                                    daemon=False)
    self._thread.start()
    return np.int64(0)

  def _write_logged(self) -> None:
    try:
      self._write()
    except BaseException as e:  # pylint: disable=broad-except
      self.error = e
    finally:
      self._written.set()
    if self.error is None or isinstance(self.error, decode.BadAudioError):
      return  # A bad file was met by the pass first (it decodes every file), which names it.
    # A full disk fails the batches that need the split (`wait` raises it),
    # and the run ends on that one line. A run that needs none of them ends
    # without: say it here, once it has ended.
    while threading.main_thread().is_alive() and not self._error_told.wait(0.5):
      pass
    if not self._error_told.is_set():
      logging.warning("audioclf: the cache of this split was not written (%s); the next run "
                      "decodes its files again", self.error)

  def _write(self) -> None:
    start = time.time()
    self.split = self.store.write_split(self.base, self.fingerprints, self._source)
    skipped = len(self.split.skipped)
    if skipped:
      logging.warning("audioclf: skipped %d bad files of %d", skipped, len(self.examples))
    logging.info("audioclf: cached %d clips (%.1f MB) in %.2fs", len(self.examples),
                 self.split.samples * np.dtype(self.split.dtype).itemsize / 1e6,
                 time.time() - start)

  def _native_words(self, row: int, header_only: bool = False) -> Optional[bytes]:
    """The sample bytes of a canonical PCM16 WAV at the target rate (b"" with header_only), else None."""
    example = self.examples[row]
    return pcm16_wav.words(example.path, example.size, self.params.sample_rate, header_only)

  def _source(self, row: int, dtype: str) -> np.ndarray:
    """The clip of `row` as the split stores it; raises NotNative for int16 of a non-canonical file."""
    if dtype != cache_format.PCM16:
      return self._clip(row, counted=True)
    data = self._native_words(row)
    if data is None:
      raise cache_format.NotNative(self.examples[row].path)
    self.decodes.add()  # Read from source again just now.
    return np.frombuffer(data, cache_format.PCM16)

  # --- Reading the written split (a cold run's later epochs).

  def wait(self) -> cache_format.Split:
    """The written split, once the fill's writer is done.

    Raises:
      store.CacheWriteError: the split could not be written (a full disk): says where.
      decode.BadAudioError: a bad file under on_bad_file="fail" kept it from being written.
      RuntimeError: anything else that kept it from being written: says what.
    """
    if not self._started:
      self.finish()
    if self._thread is not None:
      self._written.wait()  # Not join: a failed writer stays until its error is told.
    if self.split is not None:
      return self.split
    self._error_told.set()
    # A new exception per call: this runs on several of tf.data's threads at once.
    e = self.error
    if isinstance(e, cache_format.CacheWriteError):
      raise cache_format.CacheWriteError(e.strerror, e.errno) from e
    if isinstance(e, decode.BadAudioError):
      raise decode.BadAudioError(e.path, e.reason) from e
    reason = e or "the cache cannot be written"
    raise RuntimeError(f"audioclf: could not write the cache of split {self.base}: {reason}")

  # The cold pass's continuation asks these for its batches from the moment
  # the writer starts: until the writer is done they read each file's own
  # source (its words, entry or decoded clip), which the split holds the
  # same bits of, so the epoch's end does not wait for the whole split.

  def lengths(self, rows: np.ndarray) -> np.ndarray:
    split = self._split_if_written()
    if split is not None:
      return split.lengths[rows]
    return np.array([self._length(int(row)) for row in rows], np.int64)

  def windows(self, rows: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    split = self._split_if_written()
    if split is not None:
      return split.windows(rows, starts, n)
    return cache_format.cut_windows([self._clip(int(row)) for row in rows], starts, n)

  def _split_if_written(self) -> Optional[cache_format.Split]:
    """The split once no writer is at work (`wait`: its errors too), else None."""
    if self._thread is not None and not self._written.is_set():
      return None
    return self.wait()

  def _length(self, row: int) -> int:
    known = self._decoded.get(row)  # Decoded by the pass: no second read of its entry.
    if known is not None:
      return known
    if self._native_words(row, header_only=True) is not None:  # Its size says it.
      return (self.examples[row].size - pcm16_wav.HEADER_BYTES) // 2
    return len(self.decode(row))

  def _clip(self, row: int, counted: bool = False) -> np.ndarray:
    """float32 samples of `row` as a split holds them: canonical PCM16 words scaled, else decoded.

    `counted`: a canonical WAV's read counts as a decode (`decodes`), as the writer's do.
    """
    data = self._native_words(row)
    if data is None:
      return self.decode(row)  # Its entry, the complete split, or decoded (bad: none, skipped).
    if counted:
      self.decodes.add()  # Read from source again just now.
    # PCM16 to float32 times a power of two: exact, the bits Split.windows gives.
    return np.frombuffer(data, cache_format.PCM16).astype(np.float32) * cache_format.PCM16_SCALE

  # --- Filling ahead of time.

  def fill_now(self, progress: bool = False) -> None:
    """Decodes every file, then writes the split."""
    self.filled = True
    self._decode_all(range(len(self.examples)), progress)
    self.finish()

  def _decode_all(self, rows: Sequence[int], progress: bool = False) -> None:
    """Decodes those of `rows` not decoded yet on a thread pool (soundfile and soxr drop the GIL).

    Canonical WAVs are left to the split's writer, which reads them then.
    Raises the first file's error (a bad one under on_bad_file="fail").
    """
    def one(row: int) -> None:
      if row not in self._decoded and self._native_words(row, header_only=True) is None:
        self.decode(row)

    pool = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2)
    try:
      done = pool.map(one, rows)
      if progress:
        from tqdm import tqdm  # pylint: disable=g-import-not-at-top
        done = tqdm(done, total=len(rows), unit="file", disable=None)
      for _ in done:
        pass
    finally:
      # On Ctrl-C or a bad file, the files not started yet are dropped (the
      # pool's `with` would decode them all first); those in flight finish.
      pool.shutdown(wait=True, cancel_futures=True)


def fill(params: Params, splits: Sequence[str] = SPLITS, manifest: Optional[Manifest] = None,
         progress: bool = False, decodes: Optional[Decodes] = None) -> dict[str, dict]:
  """Fills every split in `splits` into the cache now; returns per-split counts.

  Training fills the cache during its first epoch anyway; this is for filling
  it ahead of time (a data-prep machine, many tuner trials, a benchmark).
  The tuner, the benchmarks and `python -m audioclf cache` all call it. The
  background recordings (`Manifest.noise`) are filled too, as "noise", where
  the params mix them in (noise_prob or silence_percent), and the impulse
  responses of --rir_dir (`Manifest.rirs`), as "rir", where reverb_prob is set.

  Args:
    params: the run's parameters.
    splits: the splits to fill.
    manifest: a manifest already loaded from `params`.
    progress: a progress bar per split.
    decodes: where the decodes are counted too (the caller's count), if anywhere.

  Returns:
    {split: {"files": n, "kept": n, "decoded": n, "was_cached": bool}}.

  Raises:
    decode.BadAudioError: a bad file under on_bad_file="fail".
    OSError: the cache could not be written (a full disk): nothing of it is left behind.
  """
  decodes = decodes or Decodes()
  manifest = manifest or manifest_lib.load(params)
  store = store_lib.Store.for_params(params)
  store.prepare()
  report = {}
  groups = [(split, manifest.files(split)) for split in splits]
  if params.noise_prob > 0 or params.silence_percent > 0:
    groups.append(("noise", list(manifest.noise)))
  if params.reverb_prob > 0:
    groups.append(("rir", list(manifest.rirs)))
  for split, examples in groups:
    if not examples:
      continue
    before = decodes.count
    opened, job = fill_examples(store, examples, params, progress, split, decodes=decodes)
    was_cached = not job.filled
    report[split] = {"files": len(examples),
                     "kept": len(examples) - len(opened.skipped) if opened else None,
                     "decoded": decodes.count - before, "was_cached": was_cached}
  return report


def fill_examples(store: store_lib.Store, examples: Sequence[Example], params: Params,
                  progress: bool = False, name: str = "",
                  read_only_decode: bool = True, decodes: Optional[Decodes] = None,
                  ) -> tuple[Optional[cache_format.Split], Fill]:
  """The split of `examples`, opened, filled first unless it is cached; and its Fill.

  The split is None where the cache is read-only; the files are then decoded
  (and lost) now, unless `read_only_decode` is False: the caller decodes them
  through the Fill as it needs them. `decodes`: the caller's count of them.
  """
  fingerprints = store.fingerprints.of(examples)
  base = store.split_base(fingerprints)
  job = Fill(store, examples, fingerprints, params, base, decodes)
  opened = store.open(base, len(examples))
  if opened is None and (read_only_decode or store.writable):
    if progress:
      logging.info("audioclf: filling the %s split (%d files)", name, len(examples))
    job.fill_now(progress)
    opened = job.split
  return opened, job
