"""Training batches of cached embeddings: batch k holds the sampler's rows of batch k, a drawn view each.

Example g (of batch k = g // batch_size) reads the row the training sampler
gives it, as from audio (the same order: shuffled per epoch, or balanced),
and its view from stream VIEW_STREAM's draw at k: a pure function of
(seed, g), so a resumed run and a cold or warm table give the same batches.
"""

from __future__ import annotations

import tensorflow as tf

from audioclf.data import batches as batches_lib
from audioclf.data.sampler import Sampler
from audioclf.embeddings.table import Table
from audioclf.params import Params

VIEW_STREAM = "embedding/view"


def dataset(params: Params, table: Table, first_batch: int = 0) -> tf.data.Dataset:
  """(embeddings float32 [batch, *shape], labels int32 [batch]) from batch `first_batch` on, forever."""
  rows, views = table.values.shape[:2]
  sampler = Sampler(params, rows, labels=table.labels, num_classes=table.num_classes)
  values = tf.constant(table.values.reshape(rows * views, *table.values.shape[2:]))
  labels = tf.constant(table.labels)
  size = params.batch_size

  def batch(k):
    picked = sampler.batch(k)
    u = tf.random.stateless_uniform([size], sampler.streams.key(VIEW_STREAM, k))
    view = tf.minimum(tf.cast(u * views, tf.int64), views - 1)
    return tf.gather(values, picked * views + view), tf.gather(labels, picked)

  ds = tf.data.Dataset.range(first_batch, batches_lib.ENDLESS)
  ds = ds.map(batches_lib.as_is(batch), num_parallel_calls=batches_lib.AUTOTUNE)
  # Prefetch last: the next batches are gathered while the head trains on this one.
  return ds.prefetch(batches_lib.AUTOTUNE).with_options(batches_lib.options(params, True))
