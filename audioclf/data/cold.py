"""The cold pass of input_fn: each file decoded as the first epoch reaches it, the split written.

  cold (first pass): rows and draws a batch at a time -> each file decoded
      (by its format's decoder: canonical WAVs natively, the rest in a
      numpy_function) -> window -> batch; the batch that completes the first
      epoch's whole batches starts writing the split as it is drawn, and
      training goes on meanwhile: the next batches read each file's source
      until the split is written, then the warm cut (Fill.windows).
"""

from __future__ import annotations

import os
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from audioclf.data import batches as batches_lib
from audioclf.data import decoders, exit_guard, graph_errors
from audioclf.data import window as window_lib
from audioclf.data.fill import Fill
from audioclf.data.sampler import Sampler
from audioclf.params import Params


def cold(params: Params, fill: Fill, labels: np.ndarray, sampler: Sampler,
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
      decode_one if training else batches_lib.as_is(lambda g: decode_one(g, g)),
      num_parallel_calls=batches_lib.AUTOTUNE,
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

  @batches_lib.as_is
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

  Training draws a batch at a time (`Sampler.batch` and `window_draws`: the
  permutation and the uniforms cost a few dozen ops), `batches` of them from `first_batch` (a
  read-only cache, without `finish`: without end), so the map that runs per
  example only decodes and cuts; each example gets the same bits as
  `Sampler.example(g)` and `window_draw(g)`. The batch that completes the epoch calls `finish`
  as it is drawn: before any of its examples is decoded, so before it is
  delivered (a run of exactly files // batch steps leaves a complete
  cache), and with no test in the function every example runs.
  """
  if not training:
    return batches_lib.examples(sampler, training, first_batch)
  batch = sampler.batch_size
  completing = first_batch + sampler.n // batch - 1

  @batches_lib.as_is
  def draws(k):
    rows, u = sampler.batch(k), sampler.window_draws(k)
    if finish is not None:
      done = tf.cond(tf.equal(k, completing), finish, lambda: tf.constant(0, tf.int64))
      with tf.control_dependencies([done]):
        rows = tf.identity(rows)
    return k * batch + tf.range(batch, dtype=tf.int64), rows, u

  stop = batches_lib.ENDLESS if finish is None else first_batch + batches
  return tf.data.Dataset.range(first_batch, stop).map(draws).unbatch()


def _file_decoder(params: Params, fill: Fill) -> Callable[[tf.Tensor], tf.Tensor]:
  """decode_file(row): float32 samples of the row-th file of `fill`, decoded (cold) in the graph.

  A file whose decoder has a graph twin (`decoders.Decoder.graph`: canonical
  PCM16 WAVs) is read and decoded natively, in parallel and without the GIL,
  where the twin takes it; every other file, and one the twin declines,
  through its decoder in Python (`Fill.decode`).
  """
  paths = tf.constant([e.path for e in fill.examples])
  exts = [os.path.splitext(e.path)[1].lower() for e in fill.examples]
  by_ext = {ext: decoders.for_extension(ext) for ext in set(exts)}  # Once a format, not a file.
  chosen = [by_ext[ext] for ext in exts]
  twins = {d.name: d.graph for d in chosen if d.graph is not None}
  # One twin for the split's files (a mix of several leaves the others to Python).
  name, twin = next(iter(twins.items()), (None, None))
  # Knowing here which rows may take it saves ops per file.
  native = np.array([d.name == name for d in chosen])
  maybe_native = tf.constant(native)

  def read(row):
    if native.all():
      return tf.io.read_file(tf.gather(paths, row))
    return tf.cond(tf.gather(maybe_native, row), lambda: tf.io.read_file(tf.gather(paths, row)),
                   lambda: tf.constant(b""))

  def in_python(row):
    return graph_errors.numpy_call(fill.decode, [row], tf.float32)

  def decode_file(row):
    if native.any():
      ok, samples = twin(params.sample_rate)(read(row))
      samples.set_shape([None])
      return tf.cond(ok, lambda: samples, lambda: in_python(row))
    return in_python(row)

  return decode_file


def _finisher(fill: Fill, sampler: Sampler, training: bool, first_batch: tf.Tensor,
              cold_batches: int) -> Callable[[], tf.Tensor]:
  """finish(): the graph's call of `fill.finish`, with the file rows the pass has yet to reach."""
  n, files, batch = sampler.n, len(fill.examples), sampler.batch_size

  def finish():
    if training and cold_batches > n // batch:
      # The rows of the cold batch after the one that completes the epoch.
      pending = sampler.batch(first_batch + n // batch)
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
      first = first.filter(batches_lib.kept)
    return batches_lib.batches(first, params, sampler, training, first_batch)

  rest = batches_lib.numpy_batches(params, sampler, first_batch + cold_batches, fill.lengths,
                                   fill.windows, labels, len(fill.examples))
  if skip:
    # Bad files make batches shorter: the whole stream is regrouped, as a warm run's is.
    both = first.concatenate(rest.unbatch()).filter(batches_lib.kept)
    return batches_lib.batches(both, params, sampler, training, first_batch)
  both = first.batch(params.batch_size, drop_remainder=True).concatenate(rest)
  return batches_lib.batches(both, params, sampler, training, first_batch, batched=True)
