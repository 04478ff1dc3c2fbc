"""Which clip comes when, and each batch's draws: pure functions of (seed, global example index).

Training reads an endless stream of examples numbered g = 0, 1, 2, ...; batch
k holds examples k*B ... k*B + B - 1. The sampler gives a batch's index, the
split rows its examples read (`batch`: audioclf.data.order, a fresh
permutation every epoch, or with --balanced_sampler the classes in turn), and
its number k is its key: the draws of batch k (each window's offset and time
shift, `window_draws`, and the augmentations': audioclf.data.augmentations)
are keyed by (seed, k) and the name of their stream (audioclf.data.streams),
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
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.data import order as order_lib
from audioclf.data import window as window_lib
from audioclf.data.augmentations.base import Sources
from audioclf.data.augmentations.compose import Augmenter
from audioclf.data.order import Order
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
    if params.balanced_sampler and labels is None:
      raise ValueError("a balanced sampler needs each row's label")
    self.n, self.batch_size = n, params.batch_size
    self.clip_samples = params.clip_samples
    self.shift = int(round(params.time_shift_seconds * params.sample_rate))
    seed = params.shuffle_seed
    # No shuffle seed: another order every run, as asked; the draws stay keyed by params.seed.
    self.order = Order(n, params.batch_size, self.shard,
                       int.from_bytes(os.urandom(4), "little") if seed is None else int(seed),
                       order_lib.balanced(labels) if params.balanced_sampler else None)
    self.epoch_size = self.order.epoch_size
    self.streams = Streams(params.seed, self.shard)
    self.augmenter = Augmenter(params, self.streams, Sources(recordings, silence_label, rirs,
                                                             num_classes, unknown_label))

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
    return order_lib.traced_batches(self.order)(tf.cast(k, tf.int64))

  def example(self, g) -> tf.Tensor:
    """Training example g's row alone (a scalar): what `batch(g // B)` gives it, bit for bit."""
    return self.order.rows(g)

  def eval_rows(self) -> range:
    """Evaluation's rows, in order: this shard's share."""
    index, count = self.shard
    return range(index, self.n, count)

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

