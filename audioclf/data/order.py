"""Which split row each training example reads: a pure function of (seed, example number).

Example g is in epoch g // n at position g % n, and reads row
`index_shuffle(g % n, (seed, epoch))`: a fresh permutation every epoch,
computed per index as Grain's samplers do, so example g needs nothing of
0 .. g-1. Balanced (`classes`), example g is of class g % C and reads that
class's next row, from a new permutation each time the class runs out.
An Order is a handful of numbers, hashable: its batches are traced once per
process (`traced_batches`), however many datasets a run builds over it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Order:
  """The read order of `n` rows for one shard (index, count), `batch_size` examples a batch.

  `classes` (`class_table`'s arrays as int64 bytes) makes it balanced.
  """

  n: int
  batch_size: int
  shard: tuple[int, int]
  seed: int
  classes: Optional[tuple[bytes, bytes, bytes]] = None

  @property
  def epoch_size(self) -> int:
    """This shard's share of an epoch: the positions index, index + count, ... of it."""
    index, count = self.shard
    return len(range(index, self.n, count))

  def rows(self, g) -> tf.Tensor:
    """The rows of example(s) g (a scalar or a vector within one batch), int64."""
    g = tf.cast(g, tf.int64)
    if self.classes is not None:
      return self._balanced_rows(g)
    epoch = g // self.epoch_size
    if g.shape.rank == 0:
      return self._rows(g, epoch)
    # A batch no larger than an epoch spans at most two of them.
    return tf.where(tf.equal(epoch, epoch[0]), self._rows(g, epoch[0]),
                    self._rows(g, epoch[0] + 1))

  def _rows(self, g, epoch):
    index, count = self.shard
    position = index + (g % self.epoch_size) * count  # In the whole epoch's permutation.
    return tf.random.experimental.index_shuffle(
        position, tf.stack([tf.constant(self.seed, tf.int64), epoch]), self.n - 1)

  def _balanced_rows(self, g):
    """Class g % C, that class's next clip; of a shard, occurrence (g // C) * count + index."""
    rows, starts, sizes = (tf.constant(np.frombuffer(a, np.int64)) for a in self.classes)
    classes = len(self.classes[2]) // 8
    index, count = self.shard
    slot = g % classes
    occurrence = (g // classes) * count + index
    size = tf.gather(sizes, slot)
    # One permutation per (seed, class, round through the class). The raw op:
    # index_shuffle's wrapper pads a batch of seeds [n, 2] along the wrong
    # axis (TF 2.15 and 2.21), and the op takes all three numbers anyway.
    seed = tf.stack([tf.fill(tf.shape(g), tf.constant(self.seed, tf.int64)), slot,
                     occurrence // size], axis=-1)
    position = tf.raw_ops.RandomIndexShuffle(index=occurrence % size, seed=seed,
                                             max_index=size - 1, rounds=4)
    return tf.gather(rows, tf.gather(starts, slot) + position)


@functools.lru_cache(maxsize=16)
def traced_batches(order: Order):
  """batch(k) -> the rows of batch k, traced once per order and process (each input_fn draws it)."""
  def batch(k):
    return order.rows(k * order.batch_size + tf.range(order.batch_size, dtype=tf.int64))

  return tf.function(batch, input_signature=[tf.TensorSpec([], tf.int64)], autograph=False)


def class_table(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(rows grouped by class, each class's first position in them, its size), classes present only."""
  labels = np.asarray(labels)
  order = np.argsort(labels, kind="stable")
  order = order[labels[order] >= 0]
  _, sizes = np.unique(labels[order], return_counts=True)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  return order.astype(np.int64), starts.astype(np.int64), sizes.astype(np.int64)


def balanced(labels: np.ndarray) -> tuple[bytes, bytes, bytes]:
  """`class_table(labels)` as Order's `classes`."""
  return tuple(a.tobytes() for a in class_table(labels))
