"""Benchmark workloads (generated audio folders) and the baseline input pipelines audioclf is measured against.

Shared by tools/bench_input.py (input pipeline alone) and tools/bench_train.py
(input pipeline feeding a model). Every pipeline here returns what
`audioclf.input_fn` returns, ({"waveform": float32 [B, clip_samples]},
int32 [B]) batches, so a benchmark can swap one for another:

  naive_input_fn          the user's original: decode, shuffle decoded waveforms, crop, batch
  best_practice_input_fn  shuffle names, repeat, one fused parallel map, batch, prefetch
  in_memory_input_fn      clips already decoded in a numpy array: the limit
  repeated_batches_input_fn  the same few batches from memory, repeated: a training step's limit

  files, labels = benchdata.make_files(benchdata.WORKLOADS["flac"], "/tmp/b/flac", 300)
  ds = benchdata.best_practice_input_fn(files, labels, benchdata.WORKLOADS["flac"], params)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import soundfile as sf
import soxr
import tensorflow as tf
from tqdm import tqdm

from audioclf.data import decode
from audioclf.compat import keras
from audioclf.data import window
from audioclf.params import Params

AUTOTUNE = tf.data.AUTOTUNE
LABELS = tuple(f"class{i}" for i in range(8))


@dataclasses.dataclass(frozen=True)
class Workload:
  """How the files of one benchmark workload are written."""
  name: str
  ext: str  # "wav" or "flac": also picks the baselines' decoder.
  seconds: float
  sample_rate: int
  channels: int
  subtype: str = "PCM_16"


WORKLOADS = {
    # Speech Commands-like: decode_wav reads these natively, audioclf's fast path too.
    "wav": Workload("wav", "wav", 1.0, 16000, 1),
    # Music/field-recording-like: only soundfile reads FLAC, and soxr must resample.
    "flac": Workload("flac", "flac", 5.0, 44100, 2),
}


def _signal(workload: Workload, label: int, rng: np.random.Generator) -> np.ndarray:
  """A tone whose pitch names the label, plus noise, float32 [frames, channels]."""
  n = int(round(workload.seconds * workload.sample_rate))
  t = np.arange(n, dtype=np.float32) / workload.sample_rate
  freq = 200.0 * (1.5 ** label) * rng.uniform(0.95, 1.05)
  x = rng.uniform(0.2, 0.6) * np.sin(2 * np.pi * freq * t, dtype=np.float32)
  # Noise on every channel keeps FLAC from compressing the files to nothing,
  # so decoding costs what it costs on real recordings.
  x = x[:, None] + 0.05 * rng.standard_normal((n, workload.channels), dtype=np.float32)
  return np.clip(x, -1.0, 1.0)


def make_files(workload: Workload, root: str, n_files: int, seed: int = 0,
               progress: Optional[Callable[[int], None]] = None) -> tuple[list[str], np.ndarray]:
  """Writes `n_files` files as <root>/<label>/spk<i>_nohash_0.<ext>, or reuses them.

  The folder is a valid audioclf `data_dir`. A stamp written last records what
  the folder holds, so a second call with the same arguments writes nothing.

  Args:
    workload: what to write.
    root: the folder; created if needed.
    n_files: how many files, spread evenly over LABELS.
    seed: seeds the tones and noise.
    progress: called with the number of files written since the last call.

  Returns:
    (absolute paths, int32 label ids), in the order audioclf's manifest lists them.
  """
  root = os.path.abspath(root)
  stamp_path = os.path.join(root, ".complete.json")
  want = {"workload": dataclasses.asdict(workload), "n_files": n_files, "seed": seed}
  rows = [(os.path.join(root, LABELS[i % len(LABELS)], f"spk{i:05d}_nohash_0.{workload.ext}"),
           i % len(LABELS)) for i in range(n_files)]
  try:
    with open(stamp_path) as f:
      done = json.load(f) == want
  except (OSError, ValueError):
    done = False
  if not done:
    for label in LABELS:
      os.makedirs(os.path.join(root, label), exist_ok=True)

    def write(i: int) -> None:
      path, label = rows[i]
      rng = np.random.default_rng([seed, i])
      sf.write(path, _signal(workload, label, rng), workload.sample_rate, subtype=workload.subtype)

    # libsndfile's encoder releases the GIL, so threads use every core.
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
      for _ in pool.map(write, range(n_files)):
        if progress:
          progress(1)
    with open(stamp_path, "w") as f:
      json.dump(want, f)
  rows.sort()  # The manifest lists labels, then names, in sorted order.
  return [p for p, _ in rows], np.asarray([y for _, y in rows], np.int32)


def define_flags(pipelines: Sequence[str], n_wav: int, n_wav_help: str) -> None:
  """The flags both benchmarks share: workload sizes, rounds, folders, what to run, JSON out."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_integer("n_wav", n_wav, n_wav_help)
  flags.DEFINE_integer("n_flac", 400, "5 s 44.1 kHz stereo FLAC files to generate.")
  flags.DEFINE_integer("repeats", 3, "Rounds of alternating runs; the table shows medians.")
  flags.DEFINE_string("out_dir", os.path.join(tempfile.gettempdir(), "audioclf_bench"),
                      "Generated files and caches; files are reused by later runs.")
  flags.DEFINE_list("workloads", list(WORKLOADS), "Workloads to run.")
  flags.DEFINE_list("pipelines", list(pipelines), "Pipelines to run.")
  flags.DEFINE_string("json", None, "Also write the results to this JSON file.")


def audioclf_params(data_dir: str, cache_dir: str, base: Optional[Params] = None) -> Params:
  """Params that make audioclf read every generated file as training data."""
  return (base or Params()).replace(data_dir=data_dir, manifest=None, cache_dir=cache_dir,
                                    validation_percent=0.0, testing_percent=0.0)


def read_and_decode(workload: Workload, params: Params) -> Callable[[tf.Tensor], tf.Tensor]:
  """path -> float32 [samples] at params.sample_rate, as a user would write it.

  WAVs at the target rate: tf.audio.decode_wav, native and parallel. FLAC:
  soundfile + soxr inside tf.numpy_function, as there is no TF op for either.
  """
  if workload.ext == "wav":
    if workload.sample_rate != params.sample_rate or workload.channels != 1:
      raise ValueError("the decode_wav baseline expects mono WAVs at params.sample_rate")
    return lambda path: tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1).audio[:, 0]

  def python_decode(path: bytes) -> np.ndarray:
    data, rate = sf.read(path.decode("utf-8"), dtype="float32", always_2d=True)
    mono = data.mean(axis=1, dtype=np.float32)
    return soxr.resample(mono, rate, params.sample_rate,
                         quality=params.resample_quality).astype(np.float32)

  def fn(path):
    samples = tf.numpy_function(python_decode, [path], tf.float32, stateful=False)
    samples.set_shape([None])
    return samples

  return fn


def random_crop(samples: tf.Tensor, params: Params) -> tf.Tensor:
  """A random clip_samples window, shifted up to time_shift_seconds, zero-padded.

  The windows audioclf's training input draws (audioclf.data.window: start
  uniform in [-shift, max(length - n, 0) + shift]), cut the cheap way: slice
  first, then pad only the slice, so each example copies clip_samples floats,
  not the whole (5 s) clip. Every pipeline here uses it, so the in-memory
  limit is a limit.
  """
  n = params.clip_samples
  shift = int(round(params.time_shift_seconds * params.sample_rate))
  length = tf.shape(samples, out_type=tf.int64)[0]
  # audioclf's own window functions, with a stateful draw as a user would write.
  start = window.window_start(tf.random.uniform([], dtype=tf.float64), length, n, shift)
  return window.cut(samples, 0, length, start, n)


def _to_features(waveforms, labels):
  return {"waveform": waveforms}, labels


def naive_input_fn(files: Sequence[str], labels: np.ndarray, workload: Workload,
                   params: Params) -> tf.data.Dataset:
  """The user's original input_fn (training mode), translated to TF 2.

  Its cost: the shuffle buffer holds every DECODED waveform, so the first
  batch of every epoch (and of every re-created dataset) waits until every
  file has been decoded, and nothing is prefetched.
  """
  decode_fn = read_and_decode(workload, params)
  num_map_threads = os.cpu_count()  # The user's fixed thread count.
  ds = tf.data.Dataset.from_tensor_slices((list(files), labels))
  ds = ds.map(lambda p, y: (decode_fn(p), y), num_parallel_calls=num_map_threads)
  ds = ds.shuffle(buffer_size=len(labels))
  ds = ds.map(lambda w, y: (random_crop(w, params), y), num_parallel_calls=num_map_threads)
  ds = ds.map(_to_features)
  ds = ds.batch(params.batch_size)
  return ds.repeat()


def best_practice_input_fn(files: Sequence[str], labels: np.ndarray, workload: Workload,
                           params: Params) -> tf.data.Dataset:
  """The accepted answer's input_fn: what a careful user writes without a cache."""
  decode_fn = read_and_decode(workload, params)
  ds = tf.data.Dataset.from_tensor_slices((list(files), labels))
  # Shuffle names, not waveforms: the buffer fills at once. Repeat after the
  # shuffle so every epoch is a full permutation, and before the map so the
  # map keeps working across the epoch boundary.
  ds = ds.shuffle(len(labels)).repeat()
  # One fused map: a single dispatch per element for read, decode and crop.
  ds = ds.map(lambda p, y: (random_crop(decode_fn(p), params), y), num_parallel_calls=AUTOTUNE)
  ds = ds.batch(params.batch_size).map(_to_features)
  return ds.prefetch(1)


def decode_all(files: Sequence[str], params: Params,
               progress: Optional[Callable[[int], None]] = None) -> np.ndarray:
  """Every file decoded exactly as audioclf caches it, float32 [files, samples].

  Raises:
    ValueError: the files do not all decode to the same length.
  """
  def one(path):
    return decode.decode_file(path, params.sample_rate, params.resample_quality)

  clips = []
  with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    for clip in pool.map(one, files):
      clips.append(clip)
      if progress:
        progress(1)
  if len({c.shape[0] for c in clips}) != 1:
    raise ValueError("decode_all needs files of one length to stack them")
  return np.stack(clips)


def in_memory_input_fn(clips: np.ndarray, labels: np.ndarray, params: Params) -> tf.data.Dataset:
  """Decoded clips already in memory: no reading, no decoding, only the crop and the batch."""
  ds = tf.data.Dataset.from_tensor_slices((clips, labels))
  ds = ds.shuffle(len(labels)).repeat()
  ds = ds.map(lambda w, y: (random_crop(w, params), y), num_parallel_calls=AUTOTUNE)
  ds = ds.batch(params.batch_size).map(_to_features)
  return ds.prefetch(AUTOTUNE)


def repeated_batches_input_fn(batches: Sequence[tuple[np.ndarray, np.ndarray]]) -> tf.data.Dataset:
  """The given (waveforms, labels) batches from memory, repeated: no reading, decoding or cutting.

  The limit of a training benchmark: what the step alone allows. The arrays
  enter through a numpy_function and a cache rather than as constants, so an
  Estimator's graph (and the graph.pbtxt it writes) stays small; after the
  first pass every element is the cached tensor itself.
  """
  waves = np.stack([w for w, _ in batches])
  labels = np.stack([y for _, y in batches])

  def element(i):
    w, y = tf.numpy_function(lambda i: (waves[i], labels[i]), [i], (tf.float32, tf.int32),
                             stateful=False)
    return _to_features(tf.ensure_shape(w, waves.shape[1:]), tf.ensure_shape(y, labels.shape[1:]))

  ds = tf.data.Dataset.range(len(batches)).map(element).cache().repeat()
  return ds.prefetch(AUTOTUNE)


@contextlib.contextmanager
def scratch_estimator(model: keras.Model, parent_dir: str) -> Iterator[tf.estimator.Estimator]:
  """model_to_estimator of `model` in a temporary model_dir, deleted afterwards.

  It writes no checkpoints, summaries or step logs: only training steps run,
  as in a benchmark's Keras fit.
  """
  model_dir = tempfile.mkdtemp(prefix="estimator-", dir=parent_dir)
  try:
    config = tf.estimator.RunConfig(model_dir=model_dir, save_checkpoints_steps=None,
                                    save_checkpoints_secs=None, save_summary_steps=None,
                                    log_step_count_steps=None)
    yield keras.estimator.model_to_estimator(keras_model=model, config=config)
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)


def log(msg: str) -> None:
  """A line on stderr, above the progress bar (tqdm's) where one is shown."""
  tqdm.write(msg, file=sys.stderr)


def each_workload(names: Sequence[str], run: Callable, total: int,
                  cold_root: str) -> tuple[list, list]:
  """(rows, targets) of every run(name, bar) -> (rows, targets), under one progress bar of `total` runs.

  Cold caches an interrupted run left in `cold_root` go first, this run's after it.
  """
  if os.path.exists(cold_root):
    log(f"removing cold caches an interrupted run left in {cold_root}")
    shutil.rmtree(cold_root, ignore_errors=True)
  rows, targets = [], []
  with tqdm(total=total, desc="runs", file=sys.stderr) as bar:
    for name in names:
      r, t = run(name, bar)
      rows += r
      targets += t
  shutil.rmtree(cold_root, ignore_errors=True)
  return rows, targets


def write_json(path: str, params: Params, rows: list, targets: list, **extra) -> None:
  """A benchmark's results, with what it ran on and the shared flags, as JSON at `path`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,redefined-outer-name
  from absl import flags  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as out:
    json.dump({"params": params.to_dict(), "cpu_count": os.cpu_count(),
               "tf_version": tf.__version__, **extra, "n_wav": f.n_wav, "n_flac": f.n_flac,
               "repeats": f.repeats, "rows": rows, "targets": targets}, out, indent=2)
  print(f"wrote {path}")
