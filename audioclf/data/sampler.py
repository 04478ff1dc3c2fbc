"""Which clip comes when: pure functions of (seed, global example index); each batch's augmentations.

Training reads an endless stream of examples numbered g = 0, 1, 2, ...; batch
k holds examples k*B ... k*B + B - 1. Example g is in epoch g // n at
position g % n, and reads row `index_shuffle(g % n, (seed, epoch))` of the
split: a fresh permutation every epoch, computed per index as Grain's
samplers do (`tf.random.experimental.index_shuffle`), so nothing bigger than
a batch of numbers is ever held, and example g can be computed without
0 .. g-1. With --balanced_sampler, example g is of class g % C instead (C
the classes the split has, so every batch holds them evenly), and its row is
the next one of that class's own permutation, a new one each time the class
runs out: a pure function of (seed, g) too. The sampler gives a batch's
index (its rows, `batch`); its number k is its key: the draws of batch k (each
window's offset and time shift, `window_draws`, and the augmentations':
audioclf.data.augmentations) are keyed by (seed, k) and the name of their
stream (audioclf.data.streams),
so those of example g are a pure function of (seed, g) for a given batch
size, and no draw moves when another augmentation is added or removed.
A batch is a pure function of (seeds, k, the cached clips and recordings):
the cold pass (which meets examples one by one, `example`), the warm cut (a
batch at a time, `batch`), a resume at step k and any parallelism give the
same bits.

Evaluation reads rows 0 .. n-1 in order and takes each clip's centre window,
as predict does (`window.center_start`). Its only noise is that of the _silence_
clips, drawn per evaluation batch from keys of their own: every evaluation
of a split sees the same silence clips.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.data import window as window_lib
from audioclf.data.augmentations.base import Sources
from audioclf.data.augmentations.compose import Augmenter
from audioclf.data.streams import Streams
from audioclf.params import Params


class Sampler:
  """The order and draws of one training or evaluation stream over a split of `n` clips.

  With `shard` (index, count), the stream is one worker's share: of every
  epoch's permutation, the positions index, index + count, ... (so the shards
  of an epoch hold each file once between them); `epoch_size` is that share's
  size, and the draws are keyed apart per shard. (0, 1) is the whole split.

  `labels` (each row's label id) are what the balanced sampler draws by;
  `recordings`, `silence_label`, `rirs`, `num_classes` and `unknown_label`
  are what the augmentations read (augmentations.base.Sources: background
  recordings, the _silence_ label, impulse responses, the classes of mixup's
  soft labels, the label of word tails).

  Raises:
    ValueError: a shard out of range, or a balanced sampler without labels,
      or mixup without num_classes.
  """

  def __init__(self, params: Params, n: int, shard: Optional[tuple[int, int]] = None,
               recordings=None, silence_label: Optional[int] = None, *,
               labels: Optional[np.ndarray] = None, num_classes: Optional[int] = None,
               rirs=None, unknown_label: Optional[int] = None):
    index, count = self.shard = tuple(shard or (0, 1))
    if not 0 <= index < count:
      raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard}")
    self.n, self.batch_size = n, params.batch_size
    self.epoch_size = len(range(index, n, count))
    self.clip_samples = params.clip_samples
    self.shift = int(round(params.time_shift_seconds * params.sample_rate))
    seed = params.shuffle_seed
    # No shuffle seed: another order every run, as asked; the draws stay keyed by params.seed.
    self.order_seed = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
    self.streams = Streams(params.seed, self.shard)
    self.augmenter = Augmenter(params, self.streams, Sources(recordings, silence_label, rirs,
                                                             num_classes, unknown_label))
    self.classes = None
    if params.balanced_sampler:
      if labels is None:
        raise ValueError("a balanced sampler needs each row's label")
      self.classes = class_table(labels)

  def mapped(self) -> "Sampler":
    """This sampler for a graph that runs on another host (a tf.data service worker's).

    Its background recordings are mapped there from that host's cache
    (`noise.Recordings.mapped`) instead of travelling in the graph; the
    response bank's spectra, made once here, travel in it.
    """
    out = copy.copy(self)
    out.augmenter = self.augmenter.mapped()
    return out

  def augments(self, training: bool) -> bool:
    """Whether `augment` changes batches of this stream at all (else it need not run)."""
    return bool(self.augmenter.on(training))

  def augment(self, waves: tf.Tensor, labels: tf.Tensor, k, training: bool = True,
              scale: Optional[float] = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Batch k's augmentations (`Augmenter.augment`): (waves, labels)."""
    return self.augmenter.augment(waves, labels, k, training, scale)

  def batch(self, k) -> tf.Tensor:
    """Training batch k's indices: the split rows its examples read, int64 [B].

    The batch's number k is its key: every draw of it comes from k through a
    named stream (`streams.key(name, k)`), the window's `window_draws(k)` too.
    """
    return self._batch_fn(tf.cast(k, tf.int64))

  @functools.cached_property
  def _batch_fn(self):
    # Traced once per sampler: a cold pass draws in two places (its own
    # batches, then those of the split it wrote).
    return tf.function(self._batch, input_signature=[tf.TensorSpec([], tf.int64)],
                       autograph=False)

  def _batch(self, k: tf.Tensor) -> tf.Tensor:
    g = k * self.batch_size + tf.range(self.batch_size, dtype=tf.int64)
    if self.classes is not None:
      return self._balanced_row(g)
    epoch = g // self.epoch_size
    # A batch no larger than an epoch spans at most two of them.
    return tf.where(tf.equal(epoch, epoch[0]), self._row(g, epoch[0]), self._row(g, epoch[0] + 1))

  def example(self, g) -> tf.Tensor:
    """Training example g's row alone (a scalar): what `batch(g // B)` gives it, bit for bit."""
    g = tf.cast(g, tf.int64)
    return self._balanced_row(g) if self.classes is not None else self._row(g, g // self.epoch_size)

  def eval_rows(self) -> range:
    """Evaluation's rows, in order: this shard's share."""
    index, count = self.shard
    return range(index, self.n, count)

  def _row(self, g, epoch):
    index, count = self.shard
    position = index + (g % self.epoch_size) * count  # In the whole epoch's permutation.
    return tf.random.experimental.index_shuffle(
        position, tf.stack([tf.constant(self.order_seed, tf.int64), epoch]), self.n - 1)

  def _balanced_row(self, g):
    """The row of example(s) g of the balanced stream: class g % C, that class's next clip.

    Of a shard (index, count), example g is its class's occurrence
    (g // C) * count + index: the shards share each class's permutations.
    """
    rows, starts, sizes = (tf.constant(a, tf.int64) for a in self.classes)
    classes = len(self.classes[2])
    index, count = self.shard
    slot = g % classes
    occurrence = (g // classes) * count + index
    size = tf.gather(sizes, slot)
    # One permutation per (seed, class, round through the class). The raw op:
    # index_shuffle's wrapper pads a batch of seeds [n, 2] along the wrong
    # axis (TF 2.15 and 2.21), and the op takes all three numbers anyway.
    seed = tf.stack([tf.fill(tf.shape(g), tf.constant(self.order_seed, tf.int64)), slot,
                     occurrence // size], axis=-1)
    position = tf.raw_ops.RandomIndexShuffle(index=occurrence % size, seed=seed,
                                             max_index=size - 1, rounds=4)
    return tf.gather(rows, tf.gather(starts, slot) + position)

  def window_draws(self, k) -> tf.Tensor:
    """Batch k's draws of where each window starts (`start`'s u): float64 [batch_size]."""
    return tf.random.stateless_uniform([self.batch_size], self.streams.key("window", k),
                                       dtype=tf.float64)

  def window_draw(self, g) -> tf.Tensor:
    """Training example g's draw of `window_draws(g // B)`, bit for bit: float64 []."""
    g = tf.cast(g, tf.int64)
    return self.window_draws(g // self.batch_size)[g % self.batch_size]

  def start(self, u, length):
    """Where windows of clips of `length` start: drawn by `u` in training, or (u None) centred."""
    return window_lib.start(u, length, self.clip_samples, self.shift)

  def decoded_window(self, samples: tf.Tensor, u=None) -> tuple[tf.Tensor, tf.Tensor]:
    """(window, length) of a decoded clip: at `start(u, ...)`, or without u its centre."""
    return window_lib.decoded(samples, u, self.clip_samples, self.shift)


def class_table(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(rows grouped by class, each class's first position in them, its size), classes present only."""
  labels = np.asarray(labels)
  order = np.argsort(labels, kind="stable")
  order = order[labels[order] >= 0]
  _, sizes = np.unique(labels[order], return_counts=True)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  return order.astype(np.int64), starts.astype(np.int64), sizes.astype(np.int64)

