"""`input_fn`: the one tf.data pipeline that feeds the Estimator, Keras fit and the tuner.

Assembly only: which clips and draws come when is `sampler`, the cache files
and their checks are `store`, decoding and writing a split is `fill`.

  warm (the split is cached): rows and draws of batch k -> one numpy call cuts
      every window out of the memory-mapped split (Split.windows); with
      native_read, each window is sliced out of the file mapped as a tensor
      instead (native ops only, no Python: a tf.data service can run it)
  cold (first pass): rows and draws a batch at a time -> each file decoded
      (canonical WAVs natively, the rest through soundfile in a
      numpy_function) -> window -> batch; the batch that completes the first
      epoch's whole batches starts writing the split as it is drawn, and
      training goes on meanwhile: the next batches read each file's source
      until the split is written, then the warm cut (Fill.windows).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
from absl import logging

from audioclf.compat import xla as compat_xla
from audioclf.data import cache_format, decode, exit_guard, graph_errors, noise, rir
from audioclf.data import manifest as manifest_lib
from audioclf.data import service as dataservice
from audioclf.data import store as store_lib
from audioclf.data import window as window_lib
from audioclf.data.fill import Fill, fill
from audioclf.data.manifest import Manifest
from audioclf.data.recent import Recent
from audioclf.data.sampler import Sampler
from audioclf.params import MODES, ParamError, Params

AUTOTUNE = tf.data.AUTOTUNE
# Autotuning is off in every pipeline (_options), as its optimizing thread
# makes destroying an iterator (the end of a fit, of an evaluation, of a
# tuner trial) wait out that thread's sleep, up to a minute, at random: woken
# by the cancellation (Model::OptimizeLoop, TensorFlow 2.15 and 2.21 alike),
# it can check IsCancelled() before the CancellationManager, still running
# its callbacks, has set it, and sleeps again. Measured after a fit under
# MirroredStrategy: 0.06-35 s with it, under 0.1 s in 12 runs of 12 without.
# Without it AUTOTUNE means: maps as parallel as their thread pool, prefetch
# buffers that grow while their consumer waits (tf.data's legacy autotuning,
# no thread); tools/bench_input.py's rows did not move (2026-12-03).
_DEFAULT_SPLIT = {"train": "train", "eval": "validation", "infer": "validation"}
_ENDLESS = 2**62


# tf.data traces the pipeline's functions as written, without AutoGraph: their
# Python never branches on a tensor (tf.cond and tf.where do), and AutoGraph's
# rewriting of them (and of every function they call) cost 1.3 s of a
# process's start on TF 2.21 and 2.9 s on TF 2.15.
_as_is = tf.autograph.experimental.do_not_convert


@_as_is
def _kept(w, y, k=None):
  """Whether an example is kept: not a file skipped as bad (`window.labels`)."""
  del w, k
  return y != window_lib.SKIPPED_LABEL


def input_fn(params: Params, mode: str, split: Optional[str] = None,
             manifest: Optional[Manifest] = None,
             seed_offset: Union[None, int, tf.Tensor] = None,
             shard: Optional[tuple[int, int]] = None,
             native_read: bool = False) -> tf.data.Dataset:
  """The dataset for `mode`: `(features, labels)` batches, prefetched.

  Mode "train" reads the train split, shuffled and repeated forever; "eval"
  and "infer" read the validation split (or `split`) once, in a fixed order.
  Decoded clips come from the persistent cache; the first pass over a split
  decodes and fills it, every later call and process reads it. With a
  shuffle seed, batch k is the same bits whether the cache was cold or warm,
  and whatever the parallelism (see `sampler`).

  Args:
    params: the run's parameters.
    mode: "train", "eval" or "infer" (tf.estimator.ModeKeys values).
    split: "train", "validation" or "test"; defaults by mode as above.
    manifest: a manifest already loaded from `params` (saves a folder scan).
    seed_offset: the training step to start at: a resumed run at step k gets
      the batches k, k+1, ... of the run it resumes. Default: the global step
      when called inside a graph that has one (as tf.estimator does), else 0.
      The Keras engine passes its initial step.
    shard: (index, count): read only this share of the file order, every
      count-th file from `index` on (of each epoch's permutation in
      training), chosen before anything is read, as each worker of a cluster
      does. The split must be in the cache already (`fill_cache`).
    native_read: on a warm cache, cut windows with native ops only, no Python
      in the graph (what a tf.data service worker needs), at about half the
      speed of the default cut (one numpy call per batch). The same bits.

  Returns:
    A tf.data.Dataset of ({"waveform": float32 [batch, clip_samples]},
    int32 [batch]), or in training with mixup, soft labels float32 [batch,
    classes] (`element_spec`). Never an iterator: the Estimator and model.fit
    take it as is.

  Raises:
    ValueError: unknown mode or split.
    params.ParamError: a training batch larger than the split, or a
      --data_service run that cannot be served.
    manifest_lib.DataError: the data source is unusable, or the split is empty.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  params.validate()
  manifest = manifest or manifest_lib.load(params)
  rows = _SplitRows.of(params, manifest, split or _DEFAULT_SPLIT[mode])
  training = mode == "train"
  first_batch = _first_batch(seed_offset) if training else 0
  mixes_noise = manifest.noise and ((training and params.noise_prob > 0)
                                    or rows.silence is not None)
  reverberates = manifest.rirs and training and params.reverb_prob > 0
  reuse = None
  if (rows.cached is not None and not params.data_service and isinstance(first_batch, int)
      and tf.executing_eagerly()):  # A graph's dataset belongs to that graph.
    # The same warm dataset again (Keras' evaluate, every tuner trial, a
    # loop of fits): reuse the one built, which saves its construction.
    fingerprints = rows.store.fingerprints.of
    reuse = (params.data_key(), mode, rows.name, first_batch, shard, native_read, rows.base,
             rows.cached.identity, rows.labels.tobytes(),
             tuple(fingerprints(manifest.noise)) if mixes_noise else (),
             tuple(fingerprints(manifest.rirs)) if reverberates else ())
    ds = _BUILT.get(reuse)
    if ds is not None:
      return ds
  sampler = Sampler(params, len(rows.examples), shard,
                    noise.Recordings.load(params, manifest.noise) if mixes_noise else None,
                    rows.silence, labels=rows.labels, num_classes=len(manifest.labels),
                    rirs=rir.load(params, manifest.rirs) if reverberates else None)
  if training:
    _check_training(params, manifest, rows, shard, sampler)
  ds = _unprefetched(params, rows, sampler, training, first_batch, native_read)
  # Prefetch last: the next batches are prepared while the model trains on this one.
  ds = ds.prefetch(AUTOTUNE).with_options(_options(params, training, sampler.augments(training)))
  if reuse is not None:
    _BUILT.put(reuse, ds)
  return ds


def _named(params: Params, split: str) -> str:
  """How errors name a split: "the 'train' split of <data_dir or manifest>"."""
  return f"the {split!r} split of {params.manifest or params.data_dir}"


def _examples_of(params: Params, manifest: Manifest, split: str) -> list[manifest_lib.Example]:
  """The split's examples; manifest_lib.DataError naming the split where it has none."""
  examples = manifest.split(split)
  if not examples:
    raise manifest_lib.DataError(
        f"{_named(params, split)} is empty "
        f"({manifest.counts()}); add files or adjust validation/testing percentages")
  return examples


@dataclasses.dataclass(frozen=True)
class _SplitRows:
  """A split as input_fn reads it: its rows, their labels, and its place in the cache.

  The split's files are rows 0 .. len(files) - 1 (what the cache holds); its
  virtual _silence_ clips follow them, rows of no samples.
  """

  name: str
  examples: list[manifest_lib.Example]
  files: list[manifest_lib.Example]
  labels: np.ndarray  # int32, a row's label id.
  silence: Optional[int]  # The _silence_ label's id where the split has such clips, else None.
  store: store_lib.Store
  fingerprints: list  # The files' content keys.
  base: str  # The split's name in the cache.
  cached: Optional[cache_format.Split]  # The split as cached, or None where it is not yet.

  @classmethod
  def of(cls, params: Params, manifest: Manifest, split: str) -> _SplitRows:
    """Raises manifest_lib.DataError where the split has no examples."""
    examples = _examples_of(params, manifest, split)
    files = manifest.files(split)
    store = store_lib.Store.for_params(params)
    fingerprints = store.fingerprints.of(files)
    base = store.split_base(fingerprints)
    return cls(split, examples, files,
               np.asarray([manifest.label_id(e.label) for e in examples], np.int32),
               manifest.label_id(manifest_lib.SILENCE) if len(files) < len(examples) else None,
               store, fingerprints, base, store.open(base, len(files)))


def _unprefetched(params: Params, rows: _SplitRows, sampler: Sampler, training: bool,
                  first_batch, native_read: bool) -> tf.data.Dataset:
  """input_fn's batches before the last prefetch: served, warm, or a cold first pass."""
  if training and params.data_service:
    return _served(params, rows.cached, rows.labels, sampler, first_batch)
  if rows.cached is not None:
    warm = _warm_native if native_read else _warm
    return warm(params, rows.cached, rows.labels, sampler, training, first_batch)
  if sampler.shard[1] > 1:
    # The cold pass writes the split from the files it decodes: a share of them cannot.
    raise manifest_lib.DataError(
        f"{_named(params, rows.name)} is not in the cache {rows.store.root!r} yet, and a "
        "sharded reader needs it there: fill it first (pipeline.fill_cache, or python -m "
        "audioclf cache --flagfile=...)")
  job = Fill(rows.store, rows.files, rows.fingerprints, params, rows.base)
  return _cold(params, job, rows.labels, sampler, training, first_batch)


def _check_training(params: Params, manifest: Manifest, rows: _SplitRows,
                    shard: Optional[tuple[int, int]], sampler: Sampler) -> None:
  """Raises where a training dataset of `rows` cannot be built as asked.

  Raises:
    params.ParamError: a batch larger than the split, or a --data_service run
      that cannot be served.
    manifest_lib.DataError: a --data_service run whose split is not cached.
  """
  if params.batch_size > sampler.epoch_size:
    # Batches run on across epochs: one larger than the split would repeat files within it.
    share = f" (shard {shard[0]} of {shard[1]}: {sampler.epoch_size})" if shard else ""
    raise ParamError(f"--batch_size={params.batch_size}: must be at most {sampler.epoch_size}, "
                     f"the examples of {_named(params, rows.name)} ({sampler.n}{share})")
  if not params.data_service:
    return
  if rows.silence is not None:
    raise ParamError(f"--data_service={params.data_service} does not serve _silence_ clips "
                     "(--silence_percent) yet: train without one of them")
  if rows.cached is None:
    raise manifest_lib.DataError(
        f"{_named(params, rows.name)} is not in the cache {rows.store.root!r}: the trainer "
        "names the split the service's workers serve by its cache; fill it first "
        "(python -m audioclf cache --flagfile=...)")
  if sampler.shard[1] > 1:
    raise ParamError(f"--data_service={params.data_service} feeds one trainer; several "
                     "(a multi-worker cluster) are not supported")
  if tf.executing_eagerly():  # The Estimator checks before it builds its graph.
    dataservice.check_workers(params, manifest, rows.name)


def element_spec(params: Params, mode: str, num_classes: int) -> tuple:
  """The structure of input_fn(params, mode)'s batches, of any batch size."""
  if mode == "train" and params.mixup_alpha:
    labels = tf.TensorSpec([None, num_classes], tf.float32)
  else:
    labels = tf.TensorSpec([None], tf.int32)
  return {"waveform": tf.TensorSpec([None, params.clip_samples], tf.float32)}, labels


# The last few warm datasets input_fn built in this process, by everything they
# depend on. A dataset is a description, not a running pipeline: each `iter`
# of it starts its own, so handing one out twice is safe. Its key holds the
# fields of params the data layer reads (`Params.data_key`: tuner trials that
# change only the model or the optimizer share a dataset), mode, split, start,
# shard, the split's content key and data file (a refilled split is another
# file) and the noise recordings' fingerprints, so a changed file, flag or
# cache builds anew. Building costs 0.05-0.08 s on 2 cores (tracing its
# functions), a fifth of a warm training run's start; only eagerly built
# datasets are kept (a graph's belongs to that graph).
_BUILT = Recent(size=8)


def fill_cache(params: Params, manifest: Manifest,
               splits: Sequence[str] = ("train", "validation")) -> int:
  """`fill` of `splits`; returns the number of files decoded.

  For readers that need a whole split cached before they start: tuner trials
  shorter than an epoch, and the sharded readers of a cluster's workers.
  """
  return sum(r["decoded"] for r in fill(params, splits, manifest).values())


def cached_clips(params: Params, manifest: Manifest, split: str) -> int:
  """The clips an evaluation pass over a cached split reads: its files less those skipped as bad.

  Raises:
    manifest_lib.DataError: the split is empty, or not in the cache.
  """
  examples = _examples_of(params, manifest, split)
  store = store_lib.Store.for_params(params)
  cached = store.open(store.split_base(store.fingerprints.of(examples)), len(examples))
  if cached is None:
    raise manifest_lib.DataError(f"the {split!r} split is not in the cache {store.root!r}; "
                                 "fill it first (pipeline.fill_cache)")
  return int(np.count_nonzero(cached.kept))


def every_file_read(params: Params, manifest: Manifest, split: str = "train") -> Optional[bool]:
  """Whether some pass has read every file of `split` (so a bad one would have been met).

  The cache holds a split whole only once a pass decoded every file of it
  (one that failed under on_bad_file="fail" leaves it unwritten); a run that
  ended before its first epoch did leaves it unwritten too. Waits for this
  process's writer of the split, if one is still at work. None where the
  cache cannot be written: there is no record to tell.
  """
  store = store_lib.Store.for_params(params)
  if not store.writable:
    return None
  base = store.split_base(store.fingerprints.of(manifest.files(split)))
  store.wait_for_writers(base)
  return store.complete(base)


def _first_batch(seed_offset):
  if seed_offset is not None:
    return seed_offset
  if not tf.executing_eagerly():
    step = tf.compat.v1.train.get_global_step()
    if step is not None:
      # Read when the Estimator initializes the iterator, after a restore.
      return tf.cast(step, tf.int64)
  return 0


def _examples(sampler: Sampler, training: bool, first_batch) -> tf.data.Dataset:
  """Global example numbers: training from batch `first_batch` on, else rows 0 .. n-1."""
  if not training:
    rows = sampler.eval_rows()
    return tf.data.Dataset.range(rows.start, rows.stop, rows.step)
  start = tf.cast(first_batch, tf.int64) * sampler.batch_size
  return tf.data.Dataset.range(start, _ENDLESS)


def _batches(ds: tf.data.Dataset, params: Params, sampler: Sampler, training: bool, first_batch,
             scale: Optional[float] = None, batched: bool = False) -> tf.data.Dataset:
  """Batches of (window, label) examples as input_fn returns them, in one map after the batch.

  `scale` turns int16 windows into float32 (one cast and multiply per batch,
  inside the augmentations' program where there are any: no float copy of
  the batch is made before it);
  the augmentations (`Sampler.augment`) are keyed by the batch's number,
  counted from `first_batch`: after the cache, a batch at a time.
  """
  if not batched:
    ds = ds.batch(params.batch_size, drop_remainder=training)

  features = functools.partial(_features, sampler, training, scale)
  if sampler.augments(training):
    ds = ds.enumerate(start=tf.cast(first_batch, tf.int64))
    return ds.map(_as_is(lambda k, batch: features(*batch, k)), num_parallel_calls=AUTOTUNE)
  return ds.map(_as_is(features), num_parallel_calls=AUTOTUNE)


def _features(sampler: Sampler, training: bool, scale: Optional[float], w, y, k=None):
  """A batch as input_fn returns it: float32 windows, batch k's augmentations applied."""
  if k is not None:  # The scaling as the augmentations' first step, in their one program.
    w, y = sampler.augment(w, y, k, training, scale)
  elif scale is not None:
    w = tf.cast(w, tf.float32) * scale
  return {"waveform": w}, y


def _warm(params: Params, split: cache_format.Split, labels: np.ndarray, sampler: Sampler,
          training: bool, first_batch) -> tf.data.Dataset:
  """Batches cut out of the memory-mapped split, one numpy call per batch (`Split.windows`)."""
  _log_skipped(split)
  if not training or split.skipped:
    # Evaluation's short last batch, and regrouping around skipped files, are
    # the per-example stream's business; their rate matters less.
    return _warm_native(params, split, labels, sampler, training, first_batch)
  exit_guard.install()  # Python runs inside this pipeline: see exit_guard.
  virtual = sampler.n - len(split.lengths)
  # PCM16 windows cross into the graph as int16 and are scaled there (`_batches`).
  ds = _numpy_batches(params, sampler, first_batch,
                      np.concatenate([split.lengths, np.zeros(virtual, np.int64)]),
                      functools.partial(split.windows, raw=True), labels, len(split.lengths),
                      window_lib.source_dtype(split))
  return _batches(ds, params, sampler, training, first_batch, window_lib.scale_of(split),
                  batched=True)


def _numpy_batches(params: Params, sampler: Sampler, first_batch,
                   lengths_of: Union[np.ndarray, Callable[[np.ndarray], np.ndarray]],
                   windows_of: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
                   labels: np.ndarray, files: int,
                   dtype: tf.DType = tf.float32) -> tf.data.Dataset:
  """Training batches from `first_batch` on, each cut in numpy: windows_of(rows, starts, n).

  `lengths_of`: every row's length, or (a cold run's continuation, whose
  split is written while its graph runs) a function of the file rows. Rows
  from `files` on are virtual _silence_ clips: no samples, never asked of
  `lengths_of` or `windows_of`.

  One numpy_function call per batch copies each window straight from the
  page cache into the batch: 3-4x less CPU than slicing per example with
  native ops. The rows and draws are the sampler's, as everywhere. The
  windows come in `dtype`, windows_of's.
  """
  batch, n = params.batch_size, params.clip_samples
  labels_t = tf.constant(labels)

  def file_lengths(rows):
    out = np.zeros(len(rows), np.int64)
    real = rows < files
    out[real] = lengths_of(rows[real])
    return out

  def file_windows(rows, starts):
    real = rows < files
    if real.all():
      return windows_of(rows, starts, n)
    out = np.zeros((len(rows), n), dtype.as_numpy_dtype)
    if real.any():
      out[real] = windows_of(rows[real], starts[real], n)
    return out

  @_as_is
  def cut(k):
    rows, u = sampler.batch(k)
    if callable(lengths_of):
      lengths = tf.ensure_shape(graph_errors.numpy_call(file_lengths, [rows], tf.int64,
                                                        stateful=False), [batch])
    else:
      lengths = tf.gather(tf.constant(lengths_of), rows)
    starts = sampler.start(u, lengths)
    w = graph_errors.numpy_call(file_windows, [rows, starts], dtype, stateful=False)
    return tf.ensure_shape(w, [batch, n]), window_lib.labels(rows, lengths, labels_t, files)

  ds = tf.data.Dataset.range(tf.cast(first_batch, tf.int64), _ENDLESS)
  return ds.map(cut, num_parallel_calls=AUTOTUNE)


def _log_skipped(split: cache_format.Split) -> None:
  if split.skipped:
    logging.info("audioclf: %d bad files were skipped when this split was cached",
                 len(split.skipped))


def _warm_native(params: Params, split: cache_format.Split, labels: np.ndarray, sampler: Sampler,
                 training: bool, first_batch) -> tf.data.Dataset:
  """Windows sliced out of the memory-mapped split per example: native ops only, no Python."""
  blob, scale = window_lib.split_tensor(split)
  table = window_lib.row_table(split, labels)

  @_as_is
  def cut(g):
    row, u = sampler.example(g) if training else (g, None)
    return _cut_rows(sampler, blob, table, row, u)

  ds = _examples(sampler, training, first_batch).map(cut, num_parallel_calls=AUTOTUNE)
  if split.skipped:
    ds = ds.filter(_kept)
  return _batches(ds, params, sampler, training, first_batch, scale)


def _cut_rows(sampler: Sampler, blob: tf.Tensor, table: tf.Tensor, rows, u):
  """(windows, labels) of `rows` (a row or a batch) of the split `blob`, `table` its row_table."""
  offsets, lengths, labels = tf.unstack(tf.gather(table, rows), axis=-1)
  return (window_lib.cut(blob, offsets, lengths, sampler.start(u, lengths), sampler.clip_samples),
          tf.cast(labels, tf.int32))


def _served(params: Params, split: cache_format.Split, labels: np.ndarray, sampler: Sampler,
            first_batch) -> tf.data.Dataset:
  """Training batches from the tf.data service at params.data_service (see audioclf.data.service).

  Batch k's rows and draws are the sampler's, as everywhere; the service's
  workers cut them, with native ops only (a worker cannot call back into this
  process's Python), out of their own copy of the split: the same file, by
  the same content key, under the same --cache_dir path. distributed_epoch
  hands each batch number to one worker, so each clip is read once per
  epoch across all of them. With augmentations, the workers apply them,
  keyed by each batch's number, and float32 batches cross the wire; without,
  windows cross it in the cache's dtype (int16 for PCM16 sources: half of
  float32) and are scaled here. Batches arrive in the order the workers
  finish them.
  """
  table = window_lib.row_table(split, labels)

  @_as_is
  def cut(k):
    rows, u = sampler.batch(k)
    # The split mapped inside the worker's function: a tensor made here would travel in the graph.
    blob, _ = window_lib.split_tensor(split)
    return (*_cut_rows(sampler, blob, table, rows, u), k)

  ds = tf.data.Dataset.range(tf.cast(first_batch, tf.int64), _ENDLESS).map(
      cut, num_parallel_calls=AUTOTUNE)
  if split.skipped:
    # A row of length zero is a file skipped as bad: regroup without it, each
    # batch numbered by its first example's (a worker's batches start in
    # different ones: each runs to the end of the one it starts in, or past).
    ds = ds.map(_as_is(lambda w, y, k: (w, y, tf.fill(tf.shape(y), k)))).unbatch()
    ds = ds.filter(_kept).batch(params.batch_size, drop_remainder=True)
    ds = ds.map(_as_is(lambda w, y, k: (w, y, k[0])))
  scale = window_lib.scale_of(split)
  if sampler.augments(True):
    # The workers augment too (the costliest part of the pipeline), batch k by
    # k's draws whatever order the batches arrive in.
    ds = ds.map(_as_is(functools.partial(_features, sampler.mapped(), True, scale)),
                num_parallel_calls=AUTOTUNE).with_options(_options(params, True, True))
    return dataservice.distribute(ds, params.data_service)
  ds = dataservice.distribute(ds.map(_as_is(lambda w, y, k: (w, y))), params.data_service)
  return _batches(ds, params, sampler, True, first_batch, scale, batched=True)


def _cold(params: Params, fill: Fill, labels: np.ndarray, sampler: Sampler,
          training: bool, first_batch) -> tf.data.Dataset:
  """The first pass decodes every file and writes the split; in training, later epochs read it."""
  exit_guard.install()  # Python runs inside this pipeline: see exit_guard.
  fill.store.prepare()
  n, batch = sampler.n, params.batch_size
  first_batch = tf.cast(first_batch, tf.int64)
  # Training: the batches that reach every file of the first epoch are cold
  # (ceil(files / batch) of them). The epoch's last whole batch (files //
  # batch of them: a run of exactly one epoch of steps leaves a complete
  # cache) calls `finish` before it is delivered, which decodes what the pass
  # has not reached and writes the split; later batches are cut from it, as a
  # warm run's are. A read-only cache is never written: there every batch is
  # cold.
  cold_batches = -(-n // batch)
  finish = (_finisher(fill, sampler, training, first_batch, cold_batches)
            if fill.store.writable else None)
  # Evaluation's last example finishes; in training, the batch that completes
  # the epoch does as it is drawn (`_cold_examples`).
  decode_one = _example_decoder(params, fill, labels, sampler, training,
                                None if training else finish)
  # deterministic: batch k holds examples k * batch on, whatever the parallelism.
  first = _cold_examples(sampler, training, first_batch, cold_batches, finish).map(
      decode_one if training else _as_is(lambda g: decode_one(g, g)),
      num_parallel_calls=AUTOTUNE,
      deterministic=True)
  return _cold_pass_batches(params, fill, labels, sampler, training, first_batch, first,
                           cold_batches)


def _example_decoder(params: Params, fill: Fill, labels: np.ndarray, sampler: Sampler,
                     training: bool, finish: Optional[Callable[[], tf.Tensor]]):
  """decode_one(g, row, u): example g's window and label, decoding its file.

  Few ops: this runs per example, and each op costs the executor's
  bookkeeping (the draws come from `_cold_examples`, a batch at a time).
  With `finish` (an evaluation pass), the last example calls it before it
  is delivered: the split is written as the pass ends.
  """
  n, files = sampler.n, len(fill.examples)  # Rows from files on are virtual _silence_ clips.
  labels_t = tf.constant(labels)
  decode_file = _file_decoder(params, fill)

  @_as_is
  def decode_one(g, row, u=None):
    if n > files:
      samples = tf.cond(row < files, lambda: decode_file(row), lambda: tf.zeros([0]))
    else:
      samples = decode_file(row)
    samples.set_shape([None])
    done = (tf.cond(tf.equal(g, n - 1), finish, lambda: tf.constant(0, tf.int64)) if finish
            else tf.constant(0, tf.int64))
    with tf.control_dependencies([done]):
      clip, length = sampler.decoded_window(samples, u if training else None)
      # A file skipped as bad decodes to no samples, as the cache holds it.
      return clip, window_lib.labels(row, length, labels_t, files)

  return decode_one


def _cold_examples(sampler: Sampler, training: bool, first_batch: tf.Tensor, batches: int,
                   finish: Optional[Callable[[], tf.Tensor]]) -> tf.data.Dataset:
  """The cold pass's example numbers g; in training with their rows and draws, (g, row, u).

  Training draws a batch at a time (`Sampler.batch`: the permutation and the
  uniforms cost a few dozen ops), `batches` of them from `first_batch` (a
  read-only cache, without `finish`: without end), so the map that runs per
  example only decodes and cuts; each example gets the same bits as
  `Sampler.example(g)`. The batch that completes the epoch calls `finish`
  as it is drawn: before any of its examples is decoded, so before it is
  delivered (a run of exactly files // batch steps leaves a complete
  cache), and with no test in the function every example runs.
  """
  if not training:
    return _examples(sampler, training, first_batch)
  batch = sampler.batch_size
  completing = first_batch + sampler.n // batch - 1

  @_as_is
  def draws(k):
    rows, u = sampler.batch(k)
    if finish is not None:
      done = tf.cond(tf.equal(k, completing), finish, lambda: tf.constant(0, tf.int64))
      with tf.control_dependencies([done]):
        rows = tf.identity(rows)
    return k * batch + tf.range(batch, dtype=tf.int64), rows, u

  stop = _ENDLESS if finish is None else first_batch + batches
  return tf.data.Dataset.range(first_batch, stop).map(draws).unbatch()


def _file_decoder(params: Params, fill: Fill) -> Callable[[tf.Tensor], tf.Tensor]:
  """decode_file(row): float32 samples of the row-th file of `fill`, decoded (cold) in the graph."""
  paths = tf.constant([e.path for e in fill.examples])
  # Only a .wav can take the native path; knowing that here saves ops per file.
  wav = np.array([os.path.splitext(e.path)[1].lower() in (".wav", ".wave") for e in fill.examples])
  maybe_native = tf.constant(wav)

  def read(row):
    if wav.all():
      return tf.io.read_file(tf.gather(paths, row))
    return tf.cond(tf.gather(maybe_native, row), lambda: tf.io.read_file(tf.gather(paths, row)),
                   lambda: tf.constant(b""))

  def soundfile_decode(row):
    return graph_errors.numpy_call(fill.decode, [row], tf.float32)

  def decode_file(row):
    # Canonical PCM16 mono WAVs at the target rate decode natively, in
    # parallel and without the GIL; everything else (FLAC, other rates,
    # multichannel, anything odd or broken) goes through soundfile + soxr.
    if wav.any():
      native, samples = decode.traced_native_wav(params.sample_rate)(read(row))
      samples.set_shape([None])
      return tf.cond(native, lambda: samples, lambda: soundfile_decode(row))
    return soundfile_decode(row)

  return decode_file


def _finisher(fill: Fill, sampler: Sampler, training: bool, first_batch: tf.Tensor,
              cold_batches: int) -> Callable[[], tf.Tensor]:
  """finish(): the graph's call of `fill.finish`, with the file rows the pass has yet to reach."""
  n, files, batch = sampler.n, len(fill.examples), sampler.batch_size

  def finish():
    if training and cold_batches > n // batch:
      # The rows of the cold batch after the one that completes the epoch.
      pending = sampler.batch(first_batch + n // batch)[0]
    else:
      pending = tf.zeros([0], tf.int64)
    # _silence_ rows (files on) have no file.
    return graph_errors.numpy_call(lambda rows: fill.finish(training, rows[rows < files]),
                                   [pending], tf.int64)

  return finish


def _cold_pass_batches(params: Params, fill: Fill, labels: np.ndarray, sampler: Sampler,
                       training: bool, first_batch: tf.Tensor, first: tf.data.Dataset,
                       cold_batches: int) -> tf.data.Dataset:
  """Batches of the cold pass's examples `first`; in training, then those cut from the written split."""
  skip = params.on_bad_file == "skip"
  if not training or not fill.store.writable:
    if skip:
      first = first.filter(_kept)
    return _batches(first, params, sampler, training, first_batch)

  rest = _numpy_batches(params, sampler, first_batch + cold_batches, fill.lengths,
                        fill.windows, labels, len(fill.examples))
  if skip:
    # Bad files make batches shorter: the whole stream is regrouped, as a warm run's is.
    both = first.concatenate(rest.unbatch()).filter(_kept)
    return _batches(both, params, sampler, training, first_batch)
  both = first.batch(params.batch_size, drop_remainder=True).concatenate(rest)
  return _batches(both, params, sampler, training, first_batch, batched=True)


def _options(params: Params, training: bool, augments: bool = False) -> tf.data.Options:
  options = tf.data.Options()
  if augments and compat_xla.XLA:
    # A map call that augments waits while its XLA programs run on the
    # intra-op threads; with twice as many tf.data threads as cores, other
    # batches' calls keep every core busy meanwhile (on 2 cores: 1.84 cores
    # used with every augmentation on, 1.99 with this; the order and the
    # bits are the same).
    options.threading.private_threadpool_size = 2 * (os.cpu_count() or 1)
  options.autotune.enabled = False  # See AUTOTUNE.
  # Fused maps do one dispatch per element instead of several.
  options.experimental_optimization.map_fusion = True
  options.experimental_optimization.map_parallelization = True
  # A shuffle seed promises the same batches every run; without one, let
  # elements leave the parallel maps in whatever order they finish.
  options.deterministic = (not training) or params.shuffle_seed is not None
  return options
