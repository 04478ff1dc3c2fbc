"""`input_fn`: the one tf.data pipeline that feeds the Estimator, Keras fit and the tuner."""

from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from audioclf import decode, manifest as manifest_lib
from audioclf.cache import ClipCache, Fill
from audioclf.manifest import Example, Manifest
from audioclf.params import MODES, Params

AUTOTUNE = tf.data.AUTOTUNE
_DEFAULT_SPLIT = {"train": "train", "eval": "validation", "infer": "validation"}


def input_fn(params: Params, mode: str, split: Optional[str] = None,
             manifest: Optional[Manifest] = None) -> tf.data.Dataset:
  """The dataset for `mode`: `(features, labels)` batches, prefetched.

  Mode "train" reads the train split, shuffled and repeated forever; "eval"
  and "infer" read the validation split (or `split`) once, in a fixed order.
  Decoded clips come from the persistent cache; the first pass over a split
  decodes and fills it, every later call reads it.

  Args:
    params: the run's parameters.
    mode: "train", "eval" or "infer" (tf.estimator.ModeKeys values).
    split: "train", "validation" or "test"; defaults by mode as above.
    manifest: a manifest already loaded from `params` (saves a folder scan).

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
  labels = [manifest.label_id(e.label) for e in examples]
  clips = clip_dataset(params, examples, labels, repeat=training)

  # Augment after the cache: the cache holds each file once, and the random
  # window, shift and noise are drawn anew every epoch.
  if training:
    clips = clips.map(lambda w, y: (_random_window(w, params), y), num_parallel_calls=AUTOTUNE)
    if params.noise_prob > 0:
      clips = clips.map(lambda w, y: (_add_noise(w, params), y), num_parallel_calls=AUTOTUNE)
  else:
    clips = clips.map(lambda w, y: (_center_window(w, params.clip_samples), y),
                      num_parallel_calls=AUTOTUNE)

  # Training batches all have the same shape (static shapes help XLA and the
  # accelerators); evaluation keeps its last, smaller batch so every example
  # counts exactly once.
  ds = clips.batch(params.batch_size, drop_remainder=training)
  ds = ds.map(lambda w, y: ({"waveform": w}, y))
  # Prefetch last: the next batches are prepared while the model trains on this one.
  ds = ds.prefetch(AUTOTUNE)
  return ds.with_options(_options(params, training))


def clip_dataset(params: Params, examples: Sequence[Example], labels: Sequence[int],
                 repeat: bool) -> tf.data.Dataset:
  """(waveform float32 [samples], label int32) per file, through the persistent cache.

  With `repeat`, files are shuffled every epoch and the stream never ends;
  without it, each file comes once, in manifest order.
  """
  cache = ClipCache(params)
  marker = cache.read_marker(examples)
  if marker is not None:
    skipped = set(marker.get("skipped", ()))
    if skipped:
      logging.info("audioclf: %d bad files were skipped when this split was cached", len(skipped))
    kept = [(e, y) for e, y in zip(examples, labels) if e.path not in skipped]
    entries = [cache.entry_path(e) for e, _ in kept]
    return _cached(entries, [y for _, y in kept], params, repeat)

  # Cold: this pass decodes and fills; with `repeat`, later epochs read what it wrote.
  cache.prepare()
  # Training drops an epoch's last partial batch (see input_fn); the fill
  # finishes the files that batch would hold as soon as the rest are stored.
  finish_at = len(examples) - len(examples) % params.batch_size if repeat else None
  fill = Fill(cache, examples, params, finish_at=finish_at)
  entries = [cache.entry_path(e) for e in examples]
  first = _decode_and_fill(examples, entries, labels, params, fill, shuffle=repeat)
  if not repeat:
    return first
  # The same file order a warm run has: the cached stream's first epoch is
  # the permutation the fill just used, so skip it. Zero-byte entries are
  # files skipped as bad; the filter drops them.
  rest = _cached(entries, labels, params, repeat=True, skip=len(entries))
  return first.concatenate(rest.filter(lambda w, y: tf.size(w) > 0))


def _file_order(ds: tf.data.Dataset, n: int, params: Params, shuffle: bool) -> tf.data.Dataset:
  # Shuffle file names, not waveforms: a buffer of n strings fills in
  # microseconds, so a re-created dataset starts at once, and the order is a
  # true permutation of the whole split every epoch.
  if shuffle:
    ds = ds.shuffle(n, seed=params.shuffle_seed, reshuffle_each_iteration=True)
  return ds


def _read_entry(path: tf.Tensor) -> tf.Tensor:
  return tf.io.decode_raw(tf.io.read_file(path), tf.float32)


def _cached(entries: Sequence[str], labels: Sequence[int], params: Params,
            repeat: bool, skip: int = 0) -> tf.data.Dataset:
  ds = tf.data.Dataset.from_tensor_slices((list(entries), np.asarray(labels, np.int32)))
  ds = _file_order(ds, len(entries), params, shuffle=repeat)
  # Repeat before the map, so reading overlaps the epoch boundary instead of draining.
  if repeat:
    ds = ds.repeat()
  if skip:
    ds = ds.skip(skip)  # Names only: nothing is read for the skipped elements.
  return ds.map(lambda path, y: (_read_entry(path), y), num_parallel_calls=AUTOTUNE)


def _decode_and_fill(examples: Sequence[Example], entries: Sequence[str], labels: Sequence[int],
                     params: Params, fill: Fill, shuffle: bool) -> tf.data.Dataset:
  """One pass over the files that decodes each and writes its cache entry.

  Entries an interrupted earlier fill already wrote are read, not decoded:
  entries are renamed into place whole, so one that exists is complete.
  """
  stored = [os.path.exists(p) for p in entries]

  def decode_one(path, entry, label, have):
    def reuse():
      samples = _read_entry(entry)
      counted = tf.numpy_function(fill.reuse, [entry, tf.size(samples, out_type=tf.int64)],
                                  tf.int64, stateful=True)
      with tf.control_dependencies([counted]):
        return tf.identity(samples)

    def decode_file():
      # Canonical PCM16 mono WAVs at the target rate decode natively, in
      # parallel and without the GIL; everything else (FLAC, other rates,
      # multichannel, anything odd or broken) goes through soundfile + soxr.
      is_wav = tf.strings.regex_full_match(tf.strings.lower(path), r".*\.wave?")
      contents = tf.cond(is_wav, lambda: tf.io.read_file(path), lambda: tf.constant(b""))
      native = tf.logical_and(is_wav, decode.native_wav_ok(contents, params.sample_rate))

      def native_path():
        samples = decode.native_decode_wav(contents)
        written = tf.numpy_function(fill.store, [entry, samples], tf.int64, stateful=True)
        with tf.control_dependencies([written]):
          return tf.identity(samples)

      return tf.cond(native, native_path, lambda: tf.numpy_function(
          fill.decode_and_store, [entry], tf.float32, stateful=True))

    samples = tf.cond(have, reuse, decode_file)
    samples.set_shape([None])
    return samples, label

  ds = tf.data.Dataset.from_tensor_slices(
      ([e.path for e in examples], list(entries), np.asarray(labels, np.int32), stored))
  ds = _file_order(ds, len(examples), params, shuffle)
  ds = ds.map(decode_one, num_parallel_calls=AUTOTUNE)
  # Zero samples mark a file skipped as bad (on_bad_file="skip").
  return ds.filter(lambda w, y: tf.size(w) > 0)


def _random_window(samples: tf.Tensor, params: Params) -> tf.Tensor:
  """A random clip_samples window, shifted up to time_shift_seconds, zero-padded."""
  n = params.clip_samples
  shift = int(round(params.time_shift_seconds * params.sample_rate))
  length = tf.shape(samples)[0]
  # Pad short clips to the window, then by `shift` on both sides, so the
  # window can start anywhere from `shift` before the audio to `shift` after it.
  samples = tf.pad(samples, [[shift, shift + tf.maximum(n - length, 0)]])
  start = tf.random.uniform([], 0, tf.shape(samples)[0] - n + 1, dtype=tf.int32)
  return tf.ensure_shape(samples[start:start + n], [n])


def _center_window(samples: tf.Tensor, n: int) -> tf.Tensor:
  """The middle n samples; a shorter clip is zero-padded at the end."""
  length = tf.shape(samples)[0]
  start = tf.maximum(length - n, 0) // 2
  samples = tf.pad(samples[start:start + n], [[0, tf.maximum(n - length, 0)]])
  return tf.ensure_shape(samples, [n])


def _add_noise(samples: tf.Tensor, params: Params) -> tf.Tensor:
  rms = tf.sqrt(tf.reduce_mean(tf.square(samples)) + 1e-12)
  scale = rms / (10.0 ** (params.noise_snr_db / 20.0))
  noisy = samples + scale * tf.random.normal(tf.shape(samples))
  return tf.where(tf.random.uniform([]) < params.noise_prob, noisy, samples)


def _options(params: Params, training: bool) -> tf.data.Options:
  options = tf.data.Options()
  # Fused maps do one dispatch per element instead of several.
  options.experimental_optimization.map_fusion = True
  options.experimental_optimization.map_parallelization = True
  # A fixed seed promises the same batches every run; without one, let
  # elements leave the parallel map in whatever order they finish.
  options.deterministic = (not training) or params.shuffle_seed is not None
  return options
