"""`input_fn`: the one tf.data pipeline that feeds the Estimator, Keras fit and the tuner."""

from __future__ import annotations

import os
from typing import Optional, Sequence, Union

import numpy as np
import tensorflow as tf
from absl import logging

from audioclf import decode, manifest as manifest_lib
from audioclf.cache import ClipCache, Fill, SplitReader, decode_count
from audioclf.manifest import Manifest
from audioclf.params import MODES, Params

AUTOTUNE = tf.data.AUTOTUNE
_DEFAULT_SPLIT = {"train": "train", "eval": "validation", "infer": "validation"}


def input_fn(params: Params, mode: str, split: Optional[str] = None,
             manifest: Optional[Manifest] = None,
             seed_offset: Union[None, int, tf.Tensor] = None,
             shard: Optional[tuple[int, int]] = None) -> tf.data.Dataset:
  """The dataset for `mode`: `(features, labels)` batches, prefetched.

  Mode "train" reads the train split, shuffled and repeated forever; "eval"
  and "infer" read the validation split (or `split`) once, in a fixed order.
  Decoded clips come from the persistent cache; the first pass over a split
  decodes and fills it, every later call and process reads it.

  Args:
    params: the run's parameters.
    mode: "train", "eval" or "infer" (tf.estimator.ModeKeys values).
    split: "train", "validation" or "test"; defaults by mode as above.
    manifest: a manifest already loaded from `params` (saves a folder scan).
    seed_offset: moves training to a later stretch of its shuffle sequence,
      so a resumed run or a re-created input_fn does not replay the same
      first epoch. Default: the global step when called inside a graph that
      has one (as tf.estimator does), else 0. The Keras engine passes its
      initial step.
    shard: (index, count): read only this share of the file order, every
      count-th file from `index` on (of each epoch's permutation in
      training), chosen before anything is read, as each worker of a cluster
      does. The split must be in the cache already (`fill_cache`).

  Returns:
    A tf.data.Dataset of ({"waveform": float32 [batch, clip_samples]},
    int32 [batch]). Never an iterator: the Estimator and model.fit take it as is.

  Raises:
    ValueError: unknown mode or split, or a split with no files.
    manifest_lib.DataError: the data source is unusable.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  params.validate()
  manifest = manifest or manifest_lib.load(params)
  split = split or _DEFAULT_SPLIT[mode]
  examples = manifest.split(split)
  if not examples:
    raise manifest_lib.DataError(
        f"the {split!r} split of {params.manifest or params.data_dir} is empty "
        f"({manifest.counts()}); add files or adjust validation/testing percentages")
  training = mode == "train"
  labels = np.asarray([manifest.label_id(e.label) for e in examples], np.int32)
  order = _Order(params, _offset(seed_offset) if training else 0, shard)

  cache = ClipCache(params)
  base = cache.split_base(examples)
  if cache.read_marker(examples, base) is not None:
    ds = _warm(params, base, labels, order, training)
  elif order.shard[1] > 1:
    # The cold pass writes the split from the files it decodes: a share of them cannot.
    raise manifest_lib.DataError(
        f"the {split!r} split of {params.manifest or params.data_dir} is not in the cache "
        f"{cache.root!r} yet, and a sharded reader needs it there: fill it first "
        "(pipeline.fill_cache, or python -m audioclf.cache --flagfile=...)")
  else:
    ds = _cold(params, Fill(cache, examples, params, base), labels, order, training)

  # Noise after the cache and per batch: drawn anew every epoch, one op for the batch.
  if training and params.noise_prob > 0:
    ds = ds.enumerate().map(lambda k, batch: (_add_noise(batch[0], params, k), batch[1]),
                            num_parallel_calls=AUTOTUNE)
  ds = ds.map(lambda w, y: ({"waveform": w}, y))
  # Prefetch last: the next batches are prepared while the model trains on this one.
  ds = ds.prefetch(AUTOTUNE)
  return ds.with_options(_options(params, training))


def fill_cache(params: Params, manifest: Manifest,
               splits: Sequence[str] = ("train", "validation")) -> int:
  """Decodes `splits` into the cache unless already there; returns the number of files decoded.

  For readers that need a whole split cached before they start: tuner trials
  shorter than an epoch, and the sharded readers of a cluster's workers.
  """
  before = decode_count()
  clips = ClipCache(params)
  for split in splits:
    examples = manifest.split(split)
    if not examples or clips.read_marker(examples) is not None:
      continue
    # One pass in evaluation order fills the split for every mode and batch size.
    for _ in input_fn(params, "eval", split=split, manifest=manifest):
      pass
  return decode_count() - before


def cached_clips(params: Params, manifest: Manifest, split: str) -> int:
  """The clips an evaluation pass over a cached split reads: its files less those skipped as bad.

  Raises:
    manifest_lib.DataError: the split is not in the cache.
  """
  examples = manifest.split(split)
  cache = ClipCache(params)
  base = cache.split_base(examples)
  if cache.read_marker(examples, base) is None:
    raise manifest_lib.DataError(f"the {split!r} split is not in the cache {cache.root!r}; "
                                 "fill it first (pipeline.fill_cache)")
  return int(np.count_nonzero(SplitReader(base).lengths > 0))


class _Order:
  """Which file comes when: a new permutation of the split every epoch.

  Each epoch's permutation is a pure function of (seed, epoch + offset), so a
  cold run and a warm run visit files in the same order, and nothing larger
  than the list of file numbers is ever buffered: a re-created dataset starts
  at once, however large the split.
  """

  def __init__(self, params: Params, offset, shard: Optional[tuple[int, int]] = None):
    seed = params.shuffle_seed
    self.seed = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
    self.offset = offset
    index, count = self.shard = tuple(shard or (0, 1))
    if not 0 <= index < count:
      raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard}")

  def rows(self, n: int, repeat: bool, values: Optional[np.ndarray] = None) -> tf.data.Dataset:
    """Numbers 0..n-1 (or `values[0..n-1]`), permuted per epoch when `repeat`; this shard's."""
    values = np.arange(n) if values is None else np.asarray(values)
    index, count = self.shard
    if not repeat:
      return tf.data.Dataset.from_tensor_slices(tf.constant(values[index::count], tf.int64))
    table = tf.constant(values, tf.int64)
    seed, offset = self.seed, self.offset

    def permutation(epoch):
      key = tf.stack([tf.constant(seed, tf.int64), epoch + tf.cast(offset, tf.int64)])
      # Permute the whole table in one op: no function call per example. Every
      # shard draws the same permutation and takes its own stride of it, so
      # the shards of an epoch hold each file once between them.
      return tf.random.experimental.stateless_shuffle(table, seed=key)[index::count]

    # Shuffle and then repeat, epoch by epoch: every file once per epoch.
    return tf.data.Dataset.range(2**62).map(permutation).unbatch()


def _offset(seed_offset):
  if seed_offset is not None:
    return seed_offset
  if not tf.executing_eagerly():
    step = tf.compat.v1.train.get_global_step()
    if step is not None:
      # Read when the Estimator initializes the iterator, after a restore.
      return tf.cast(step, tf.int64)
  return 0


def _window_rows(reader: SplitReader, labels: np.ndarray, params: Params, training: bool,
                 offset=0):
  """Maps batches of row numbers to (windows float32 [b, n], labels int32 [b]).

  A row whose clip is empty (a file skipped as bad) gets label -1.
  """
  labels_t = tf.constant(labels)
  n, shift = params.clip_samples, int(round(params.time_shift_seconds * params.sample_rate))

  def windows(rows, u):
    lengths = reader.lengths[rows]
    if not training:  # Evaluation: the middle of the clip; short clips padded at the end.
      starts = np.maximum(lengths - n, 0) // 2
    else:  # Training: a window that starts up to `shift` before the clip or after its end.
      span = np.maximum(lengths - n, 0) + 2 * shift + 1
      starts = np.minimum((u * span).astype(np.int64), span - 1) - shift
    return reader.windows(rows, starts, n), lengths > 0

  def cut(batch_no, rows):
    # Stateless draws keyed by the batch's number from the seed offset (the
    # global step in the engines): the same windows whatever order the
    # parallel map finishes in, and new ones after a resume.
    u = tf.random.stateless_uniform(tf.shape(rows), seed=tf.stack([
        tf.constant(params.seed, tf.int64), batch_no + tf.cast(offset, tf.int64)]),
                                    dtype=tf.float64)
    w, kept = tf.numpy_function(windows, [rows, u], (tf.float32, tf.bool), stateful=False)
    w = tf.ensure_shape(w, [rows.shape[0], n])  # Static batch size where the rows have one.
    kept = tf.ensure_shape(kept, rows.shape)
    return w, tf.where(kept, tf.gather(labels_t, rows), -1)

  return cut


def _warm(params: Params, base: str, labels: np.ndarray, order: _Order,
          training: bool) -> tf.data.Dataset:
  """Batches cut from a complete split: one memory-mapped gather per batch."""
  reader = SplitReader(base)
  kept = np.flatnonzero(reader.lengths > 0)  # Zero length: a file skipped as bad.
  if len(kept) < len(labels):
    logging.info("audioclf: %d bad files were skipped when this split was cached",
                 len(labels) - len(kept))
  rows = order.rows(len(kept), repeat=training, values=kept)
  ds = rows.batch(params.batch_size, drop_remainder=training).enumerate()
  return ds.map(_window_rows(reader, labels, params, training, order.offset),
                num_parallel_calls=AUTOTUNE)


def _cold(params: Params, fill: Fill, labels: np.ndarray, order: _Order,
          training: bool) -> tf.data.Dataset:
  """The first pass decodes every file and writes the split; in training, later epochs read it."""
  fill.cache.prepare()
  examples = fill.examples
  n, batch = len(examples), params.batch_size
  paths = tf.constant([e.path for e in examples])
  labels_t = tf.constant(labels)
  skip = params.on_bad_file == "skip"
  # Training batches run on across epochs, as a warm run's do: the first pass
  # decodes the files of epoch 1 and, cold as well, the few of epoch 2 that
  # complete its last batch; whole batches from the written split follow.
  # (Under "skip", bad files make the count of good ones unknown until the
  # pass ends: there the stream is rebatched example by example instead.)
  fill_up = (batch - n % batch) % batch if training and not skip else 0
  # The element whose batch completes epoch 1 writes the split before it is
  # delivered, so a run of exactly one epoch of steps leaves a complete cache.
  finish_at = (n - n % batch if training and n >= batch else n) - 1

  # Only a .wav can take the native path; knowing that here saves ops per file.
  wav = np.array([os.path.splitext(e.path)[1].lower() in (".wav", ".wave") for e in examples])
  maybe_native = tf.constant(wav)

  def read(row):
    if wav.all():
      return tf.io.read_file(paths[row])
    return tf.cond(maybe_native[row], lambda: tf.io.read_file(paths[row]),
                   lambda: tf.constant(b""))

  def soundfile_decode(row):
    return tf.numpy_function(fill.decode, [row], tf.float32, stateful=True)

  def decode_one(i, row):
    # Canonical PCM16 mono WAVs at the target rate decode natively, in
    # parallel and without the GIL; everything else (FLAC, other rates,
    # multichannel, anything odd or broken) goes through soundfile + soxr.
    if wav.any():
      native, samples = decode.native_wav(read(row), params.sample_rate)
      samples = tf.cond(native, lambda: samples, lambda: soundfile_decode(row))
    else:
      samples = soundfile_decode(row)
    samples.set_shape([None])
    # Training writes the split in the background and keeps going; see Fill.finish.
    done = tf.cond(tf.equal(i, finish_at),
                   lambda: tf.numpy_function(lambda: fill.finish(background=training), [],
                                             tf.int64, stateful=True),
                   lambda: tf.constant(0, tf.int64))
    with tf.control_dependencies([done]):
      if training:  # Keys apart from the warm batches' (those count batches, these files).
        w = _random_window(samples, params, -1 - i)
      else:
        w = _center_window(samples, params.clip_samples)
      # A file skipped as bad decodes to no samples: label -1 marks it for the filter.
      return w, tf.where(tf.size(samples) > 0, labels_t[row], -1)

  rows = order.rows(n, repeat=training)
  # deterministic: the element that finishes must stay in the batch it completes.
  first = rows.take(n + fill_up).enumerate().map(decode_one, num_parallel_calls=AUTOTUNE,
                                                 deterministic=True)
  if skip:
    first = first.filter(lambda w, y: y >= 0)
  if not training:
    return first.batch(batch)

  # Later epochs: the warm path's batches, over the split the first pass wrote.
  cut = _window_rows(SplitReader(fill.base), labels, params, True, order.offset)
  rest = rows.skip(n + fill_up).batch(batch, drop_remainder=True).enumerate()
  rest = rest.map(cut, num_parallel_calls=AUTOTUNE)
  if skip:
    rest = rest.unbatch().filter(lambda w, y: y >= 0)
    return first.concatenate(rest).batch(batch, drop_remainder=True)
  return first.batch(batch, drop_remainder=True).concatenate(rest)


def _random_window(samples: tf.Tensor, params: Params, key=0) -> tf.Tensor:
  """A random clip_samples window, shifted up to time_shift_seconds, zero-padded.

  The window starts anywhere from `shift` before the audio to `shift` after
  the last full window (the warm path draws the same way). It slices first
  and pads only the slice: padding a 5 s clip to cut 1 s is wasted work. The
  draw is stateless, keyed by (seed, key), so parallel maps stay reproducible.
  """
  n = params.clip_samples
  shift = int(round(params.time_shift_seconds * params.sample_rate))
  length = tf.shape(samples)[0]
  span = tf.maximum(length - n, 0) + 2 * shift + 1
  seed = tf.stack([tf.constant(params.seed, tf.int64), tf.cast(key, tf.int64)])
  start = tf.random.stateless_uniform([], seed, 0, span, dtype=tf.int32) - shift
  lo = tf.clip_by_value(start, 0, length)
  hi = tf.clip_by_value(start + n, lo, length)
  return tf.ensure_shape(tf.pad(samples[lo:hi], [[lo - start, n - (lo - start) - (hi - lo)]]), [n])


def _center_window(samples: tf.Tensor, n: int) -> tf.Tensor:
  """The middle n samples; a shorter clip is zero-padded at the end."""
  length = tf.shape(samples)[0]
  start = tf.maximum(length - n, 0) // 2
  samples = tf.pad(samples[start:start + n], [[0, tf.maximum(n - length, 0)]])
  return tf.ensure_shape(samples, [n])


def _add_noise(samples: tf.Tensor, params: Params, key=0) -> tf.Tensor:
  """White noise at noise_snr_db under each example (last axis), with chance noise_prob."""
  rms = tf.sqrt(tf.reduce_mean(tf.square(samples), axis=-1, keepdims=True) + 1e-12)
  scale = rms / (10.0 ** (params.noise_snr_db / 20.0))
  seed = tf.stack([tf.constant(params.seed + 1, tf.int64), tf.cast(key, tf.int64)])
  noisy = samples + scale * tf.random.stateless_normal(tf.shape(samples), seed)
  chosen = tf.random.stateless_uniform(tf.shape(rms), seed + 1) < params.noise_prob
  return tf.where(chosen, noisy, samples)


def _options(params: Params, training: bool) -> tf.data.Options:
  options = tf.data.Options()
  # Fused maps do one dispatch per element instead of several.
  options.experimental_optimization.map_fusion = True
  options.experimental_optimization.map_parallelization = True
  # A fixed seed promises the same batches every run; without one, let
  # elements leave the parallel map in whatever order they finish.
  options.deterministic = (not training) or params.shuffle_seed is not None
  return options
