"""Training batches of cached embeddings: batch k holds the sampler's rows of batch k, a drawn view each.

Example g (of batch k = g // batch_size) reads the row the training sampler
gives it, as from audio (the same order: shuffled per epoch, or balanced),
and its view from stream VIEW_STREAM's draw at k: a pure function of
(seed, g), so a resumed run and a cold or warm table give the same batches.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from audioclf.data import batches as batches_lib
from audioclf.data.sampler import Sampler
from audioclf.embeddings.table import Table
from audioclf.params import Params

VIEW_STREAM = "embedding/view"


def dataset(params: Params, table: Table, first_batch: int = 0,
            in_graph: bool = False) -> tf.data.Dataset:
  """(embeddings float32 [batch, *shape], labels int32 [batch]) from batch `first_batch` on, forever.

  Args:
    params: the run's parameters (seed, batch size, sampling).
    table: the embedding table.
    first_batch: the batch to start from: the global step.
    in_graph: the dataset is built in a graph (the Estimator's): its rows are
      gathered from the table in numpy, not from a constant, which the graph,
      its graph.pbtxt and every checkpoint's .meta would hold whole.
  """
  rows, views = table.values.shape[:2]
  sampler = Sampler(params, rows, labels=table.labels, num_classes=table.num_classes)
  flat = table.values.reshape(rows * views, *table.values.shape[2:])
  gather = _numpy_gather(flat) if in_graph else functools.partial(tf.gather, tf.constant(flat))
  labels = tf.constant(table.labels)
  size = params.batch_size

  def batch(k):
    picked = sampler.batch(k)
    u = tf.random.stateless_uniform([size], sampler.streams.key(VIEW_STREAM, k))
    view = tf.minimum(tf.cast(u * views, tf.int64), views - 1)
    return gather(picked * views + view), tf.gather(labels, picked)

  ds = tf.data.Dataset.range(first_batch, batches_lib.ENDLESS)
  ds = ds.map(batches_lib.as_is(batch), num_parallel_calls=batches_lib.AUTOTUNE)
  # Prefetch last: the next batches are gathered while the head trains on this one.
  return ds.prefetch(batches_lib.AUTOTUNE).with_options(batches_lib.options(params, True))


def _numpy_gather(flat: np.ndarray):
  """indices int64 [n] -> flat[indices] float32 [n, *shape], gathered by numpy."""

  def gather(indices):
    rows = tf.numpy_function(lambda i: flat[i], [indices], tf.float32, stateful=False)
    return tf.ensure_shape(rows, [*indices.shape, *flat.shape[1:]])

  return gather
