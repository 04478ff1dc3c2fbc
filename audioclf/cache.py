"""The persistent cache of decoded, resampled clips that every input_fn call and process shares.

Layout under `cache_dir`:

  <decode key>/                    one folder per set of decode parameters
    entries/<kk>/<key>.f32         raw little-endian float32 samples of one file
    splits/<split key>.json        "this split is complete": written last, atomically

An entry's key hashes the file's absolute path, size and mtime, so an edited
file gets a new entry instead of a stale one; the decode key hashes every
decode parameter, so a new sample rate gets a new folder. Entries are written
to a temporary name and renamed, so a reader never sees half an entry, and two
processes filling the same cache write identical bytes under the same name.
A split's marker is written only after every one of its entries exists, so a
run killed while filling leaves no marker and the next run fills again: there
are no locks to go stale. An entry of zero bytes records a file skipped under
`on_bad_file="skip"`.

  python -m audioclf.cache --data_dir=data/speech_words    # pre-fill every split
  python -m audioclf.cache --data_dir=... --info           # what is cached
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

CACHE_VERSION = 1  # Bump when the entry format changes; old folders are then ignored.


def default_cache_dir() -> str:
  return os.environ.get("AUDIOCLF_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "audioclf")


def _digest(*parts) -> str:
  h = hashlib.blake2b(digest_size=16)
  for p in parts:
    h.update(str(p).encode("utf-8"))
    h.update(b"\0")
  return h.hexdigest()


class ClipCache:
  """Names and writes the cache files for one set of decode parameters."""

  def __init__(self, params: Params):
    self.decode_key = _digest("v", CACHE_VERSION, "sr", params.sample_rate,
                              "q", params.resample_quality, "mono")
    self.root = os.path.join(params.cache_dir or default_cache_dir(), self.decode_key)
    self.entries_dir = os.path.join(self.root, "entries")
    self.splits_dir = os.path.join(self.root, "splits")

  def entry_path(self, example: Example) -> str:
    key = _digest(example.path, example.size, example.mtime_ns)
    return os.path.join(self.entries_dir, key[:2], key + ".f32")

  def split_key(self, examples: Sequence[Example]) -> str:
    return _digest(*sorted(self.entry_path(e) for e in examples))

  def marker_path(self, examples: Sequence[Example]) -> str:
    return os.path.join(self.splits_dir, self.split_key(examples) + ".json")

  def read_marker(self, examples: Sequence[Example]) -> Optional[dict]:
    """The completed split's record (count, skipped paths), or None when not complete."""
    try:
      with open(self.marker_path(examples)) as f:
        return json.load(f)
    except (OSError, ValueError):
      return None  # Missing, or unreadable: fill again rather than trust it.

  def prepare(self) -> None:
    for kk in range(256):
      os.makedirs(os.path.join(self.entries_dir, f"{kk:02x}"), exist_ok=True)
    os.makedirs(self.splits_dir, exist_ok=True)

  @staticmethod
  def write_entry(path: str, samples: np.ndarray) -> None:
    _atomic_write(path, np.ascontiguousarray(samples, dtype="<f4").tobytes())

  def write_marker(self, examples: Sequence[Example], skipped: Sequence[str]) -> None:
    record = {"count": len(examples), "skipped": sorted(skipped), "written": time.time()}
    _atomic_write(self.marker_path(examples), json.dumps(record).encode("utf-8"))


def _atomic_write(path: str, data: bytes) -> None:
  tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)


class Fill:
  """One pass that fills a split; marks the split complete when every file is stored.

  Its methods run on tf.data's threads (through tf.numpy_function), so shared
  state sits behind a lock, and a file counts once however often it is seen.

  Once `finish_at` files are stored, the call that stored the last of them
  decodes whatever is left before it returns. Training drops the last partial
  batch of an epoch, so a run of exactly one epoch of steps would otherwise
  stop with a few files never decoded and the split never marked complete.
  """

  def __init__(self, cache: ClipCache, examples: Sequence[Example], params: Params,
               finish_at: Optional[int] = None):
    self.cache, self.params = cache, params
    self.examples = list(examples)
    self.paths = {cache.entry_path(e).encode(): e.path for e in self.examples}
    self.finish_at = len(self.examples) if finish_at is None else finish_at
    self._done: set[bytes] = set()
    self._skipped: list[str] = []
    self._lock = threading.Lock()
    self._finishing = False
    self.complete = False

  def decode_and_store(self, entry: bytes) -> np.ndarray:
    """Decodes the entry's file with soundfile + soxr and stores it; [] for a skipped file."""
    path = self.paths[entry]
    try:
      samples = decode.decode_file(path, self.params.sample_rate, self.params.resample_quality)
    except decode.BadAudioError as e:
      if self.params.on_bad_file != "skip":
        raise
      logging.warning("audioclf: skipping bad audio file %s: %s", e.path, e.reason)
      samples = np.zeros(0, np.float32)
      ClipCache.write_entry(entry.decode(), samples)
      self._record(entry, skipped=True)
      return samples
    ClipCache.write_entry(entry.decode(), samples)
    self._record(entry)
    return samples

  def store(self, entry: bytes, samples: np.ndarray) -> np.int64:
    """Stores samples decoded elsewhere (the native WAV path)."""
    ClipCache.write_entry(entry.decode(), samples)
    self._record(entry)
    return np.int64(samples.shape[0])

  def reuse(self, entry: bytes, size: np.int64) -> np.int64:
    """Counts an entry an earlier, unfinished fill already wrote (zero samples: skipped)."""
    self._record(entry, skipped=size == 0, decoded=False)
    return size

  def _record(self, entry: bytes, skipped: bool = False, decoded: bool = True) -> None:
    finish = False
    with self._lock:
      if decoded:
        _STATS["decoded"] += 1
      if entry in self._done:
        return
      self._done.add(entry)
      if skipped:
        self._skipped.append(self.paths[entry])
      if len(self._done) == len(self.examples) and not self.complete:
        self.cache.write_marker(self.examples, self._skipped)
        self.complete = True
        if self._skipped:
          logging.warning("audioclf: skipped %d bad files of %d", len(self._skipped),
                          len(self.examples))
      elif len(self._done) >= self.finish_at and not self._finishing:
        self._finishing = finish = True
    if finish:
      for entry in [k for k in self.paths if k not in self._done]:
        self.decode_and_store(entry)


_STATS: collections.Counter = collections.Counter()


def decode_count() -> int:
  """Files decoded (not read from the cache) by this process so far."""
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
    ds = pipeline.clip_dataset(params, examples, [manifest.label_id(e.label) for e in examples],
                               repeat=False)
    kept = sum(1 for _ in tqdm(ds.as_numpy_iterator(), total=len(examples), desc=split,
                               unit="file", disable=None))
    report[split] = {"files": len(examples), "kept": kept, "decoded": decode_count() - decoded,
                     "was_cached": warm}
  return report


def cache_info(params: Params) -> dict:
  """Size and completeness of the cache that `params` uses."""
  cache = ClipCache(params)
  entries = nbytes = 0
  for dirpath, _, files in os.walk(cache.entries_dir):
    for name in files:
      if name.endswith(".f32"):
        entries += 1
        nbytes += os.path.getsize(os.path.join(dirpath, name))
  splits = len(os.listdir(cache.splits_dir)) if os.path.isdir(cache.splits_dir) else 0
  return {"root": cache.root, "entries": entries, "bytes": nbytes, "complete_splits": splits}


def main(argv: Sequence[str]) -> None:
  from absl import flags  # pylint: disable=g-import-not-at-top
  from audioclf import cli  # pylint: disable=g-import-not-at-top
  del argv
  params = cli.params_from_flags()
  if flags.FLAGS.info:
    print(json.dumps(cache_info(params)))
    return
  start = time.time()
  report = prefill(params)
  print(json.dumps({"seconds": round(time.time() - start, 2), **report, **cache_info(params)}))


def run() -> None:
  from absl import app, flags  # pylint: disable=g-import-not-at-top
  from audioclf import cli  # pylint: disable=g-import-not-at-top
  cli.define_flags()
  flags.DEFINE_bool("info", False, "Print what is cached instead of filling it.")
  app.run(main)


if __name__ == "__main__":
  run()
