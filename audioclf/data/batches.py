"""The warm and served reads of input_fn: batches cut out of a cached split, and what every path shares.

  warm: rows and draws of batch k -> one numpy call cuts every window out of
      the memory-mapped split (Split.windows); with native_read, each window
      is sliced out of the file mapped as a tensor instead (native ops only,
      no Python: a tf.data service can run it)
  served: batch numbers -> a tf.data service's workers cut (and augment) them
  every path: batches of (window, label) -> features, batch k's augmentations
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Optional, Union

import numpy as np
import tensorflow as tf
from absl import logging

from audioclf.compat import xla as compat_xla
from audioclf.data import cache_format, exit_guard, graph_errors
from audioclf.data import service as dataservice
from audioclf.data import window as window_lib
from audioclf.data.sampler import Sampler
from audioclf.params import Params

# Autotuning is off in every pipeline (`options`): its optimizing thread can make destroying an
# iterator (the end of a fit, an evaluation, a trial) wait out its sleep, up to a minute. Here
# AUTOTUNE means maps as parallel as their thread pool, and prefetch buffers that grow while
# their consumer waits.
AUTOTUNE = tf.data.AUTOTUNE
ENDLESS = 2**62  # The end of a training stream's batch numbers: none is reached.

# The pipeline's functions never branch on a tensor in Python: AutoGraph's rewriting only costs.
as_is = tf.autograph.experimental.do_not_convert


@as_is


def kept(w, y, k=None):
  """Whether an example is kept: not a file skipped as bad (`window.labels`)."""
  del w, k
  return y != window_lib.SKIPPED_LABEL


def examples(sampler: Sampler, training: bool, first_batch) -> tf.data.Dataset:
  """Global example numbers: training from batch `first_batch` on, else rows 0 .. n-1."""
  if not training:
    rows = sampler.eval_rows()
    return tf.data.Dataset.range(rows.start, rows.stop, rows.step)
  start = tf.cast(first_batch, tf.int64) * sampler.batch_size
  return tf.data.Dataset.range(start, ENDLESS)


def batches(ds: tf.data.Dataset, params: Params, sampler: Sampler, training: bool, first_batch,
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

  to_features = functools.partial(features, sampler, training, scale)
  if sampler.augments(training):
    ds = ds.enumerate(start=tf.cast(first_batch, tf.int64))
    return ds.map(as_is(lambda k, batch: to_features(*batch, k)), num_parallel_calls=AUTOTUNE)
  return ds.map(as_is(to_features), num_parallel_calls=AUTOTUNE)


def features(sampler: Sampler, training: bool, scale: Optional[float], w, y, k=None):
  """A batch as input_fn returns it: float32 windows, batch k's augmentations applied."""
  if k is not None:  # The scaling as the augmentations' first step, in their one program.
    w, y = sampler.augment(w, y, k, training, scale)
  elif scale is not None:
    w = tf.cast(w, tf.float32) * scale
  return {"waveform": w}, y


def options(params: Params, training: bool, augments: bool = False) -> tf.data.Options:
  """The options of every pipeline: no autotuning thread; deterministic with a shuffle seed."""
  out = tf.data.Options()
  if augments and compat_xla.XLA:
    # A map call that augments waits while its XLA programs run on the
    # intra-op threads; with twice as many tf.data threads as cores, other
    # batches' calls keep every core busy meanwhile (the same order and bits).
    out.threading.private_threadpool_size = 2 * (os.cpu_count() or 1)
  out.autotune.enabled = False  # See AUTOTUNE.
  # Fused maps do one dispatch per element instead of several.
  out.experimental_optimization.map_fusion = True
  out.experimental_optimization.map_parallelization = True
  # A shuffle seed promises the same batches every run; without one, let
  # elements leave the parallel maps in whatever order they finish.
  out.deterministic = (not training) or params.shuffle_seed is not None
  return out


def warm(params: Params, split: cache_format.Split, labels: np.ndarray, sampler: Sampler,
         training: bool, first_batch) -> tf.data.Dataset:
  """Batches cut out of the memory-mapped split, one numpy call per batch (`Split.windows`)."""
  _log_skipped(split)
  if not training or split.skipped:
    # Evaluation's short last batch, and regrouping around skipped files, are
    # the per-example stream's business; their rate matters less.
    return warm_native(params, split, labels, sampler, training, first_batch)
  exit_guard.install()  # Python runs inside this pipeline: see exit_guard.
  virtual = sampler.n - len(split.lengths)
  # PCM16 windows cross into the graph as int16 and are scaled there (`batches`).
  ds = numpy_batches(params, sampler, first_batch,
                     np.concatenate([split.lengths, np.zeros(virtual, np.int64)]),
                     functools.partial(split.windows, raw=True), labels, len(split.lengths),
                     window_lib.source_dtype(split))
  return batches(ds, params, sampler, training, first_batch, window_lib.scale_of(split),
                 batched=True)


def numpy_batches(params: Params, sampler: Sampler, first_batch,
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

  @as_is
  def cut(k):
    rows, u = sampler.batch(k), sampler.window_draws(k)
    if callable(lengths_of):
      lengths = tf.ensure_shape(graph_errors.numpy_call(file_lengths, [rows], tf.int64,
                                                        stateful=False), [batch])
    else:
      lengths = tf.gather(tf.constant(lengths_of), rows)
    starts = sampler.start(u, lengths)
    w = graph_errors.numpy_call(file_windows, [rows, starts], dtype, stateful=False)
    return tf.ensure_shape(w, [batch, n]), window_lib.labels(rows, lengths, labels_t, files)

  ds = tf.data.Dataset.range(tf.cast(first_batch, tf.int64), ENDLESS)
  return ds.map(cut, num_parallel_calls=AUTOTUNE)


def _log_skipped(split: cache_format.Split) -> None:
  if split.skipped:
    logging.info("audioclf: %d bad files were skipped when this split was cached",
                 len(split.skipped))


def warm_native(params: Params, split: cache_format.Split, labels: np.ndarray, sampler: Sampler,
                training: bool, first_batch) -> tf.data.Dataset:
  """Windows sliced out of the memory-mapped split per example: native ops only, no Python."""
  blob, scale = window_lib.split_tensor(split)
  table = window_lib.row_table(split, labels)

  @as_is
  def cut(g):
    row, u = (sampler.example(g), sampler.window_draw(g)) if training else (g, None)
    return _cut_rows(sampler, blob, table, row, u)

  ds = examples(sampler, training, first_batch).map(cut, num_parallel_calls=AUTOTUNE)
  if split.skipped:
    ds = ds.filter(kept)
  return batches(ds, params, sampler, training, first_batch, scale)


def _cut_rows(sampler: Sampler, blob: tf.Tensor, table: tf.Tensor, rows, u):
  """(windows, labels) of `rows` (a row or a batch) of the split `blob`, `table` its row_table."""
  offsets, lengths, labels = tf.unstack(tf.gather(table, rows), axis=-1)
  return (window_lib.cut(blob, offsets, lengths, sampler.start(u, lengths), sampler.clip_samples),
          tf.cast(labels, tf.int32))


def served(params: Params, split: cache_format.Split, labels: np.ndarray, sampler: Sampler,
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

  @as_is
  def cut(k):
    rows, u = sampler.batch(k), sampler.window_draws(k)
    # The split mapped inside the worker's function: a tensor made here would travel in the graph.
    blob, _ = window_lib.split_tensor(split)
    return (*_cut_rows(sampler, blob, table, rows, u), k)

  ds = tf.data.Dataset.range(tf.cast(first_batch, tf.int64), ENDLESS).map(
      cut, num_parallel_calls=AUTOTUNE)
  if split.skipped:
    # A row of length zero is a file skipped as bad: regroup without it, each
    # batch numbered by its first example's (a worker's batches start in
    # different ones: each runs to the end of the one it starts in, or past).
    ds = ds.map(as_is(lambda w, y, k: (w, y, tf.fill(tf.shape(y), k)))).unbatch()
    ds = ds.filter(kept).batch(params.batch_size, drop_remainder=True)
    ds = ds.map(as_is(lambda w, y, k: (w, y, k[0])))
  scale = window_lib.scale_of(split)
  if sampler.augments(True):
    # The workers augment too (the costliest part of the pipeline), batch k by
    # k's draws whatever order the batches arrive in.
    ds = ds.map(as_is(functools.partial(features, sampler.mapped(), True, scale)),
                num_parallel_calls=AUTOTUNE).with_options(options(params, True, True))
    return dataservice.distribute(ds, params.data_service)
  ds = dataservice.distribute(ds.map(as_is(lambda w, y, k: (w, y))), params.data_service)
  return batches(ds, params, sampler, True, first_batch, scale, batched=True)
