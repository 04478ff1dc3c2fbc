"""The views of a split's rows that get embedded: view k of row i is a pure function of (seed, i, k).

View 0 is what evaluation feeds the model: the clip's centre window, only a
_silence_ clip given its noise. Views 1 .. K-1 are training examples: a
window start and the augmentations that act on the audio before the front
end (speed, pitch and tempo, reverberation, noise, gain: `Sampler.augment`;
never mixup, which mixes labels), drawn as training draws them, from the
sampler's own streams. The views of chunk c (rows c * CHUNK ...) in view k
are batch k * chunks + c of a sampler of CHUNK-row batches under a seed of
their own (`view_seed`): row i's draws in view k depend on the seed, i, k
and the split's size alone.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.data import cache_format
from audioclf.data.sampler import Sampler
from audioclf.data.streams import stream_id
from audioclf.params import Params

CHUNK = 32  # Rows per batch of views: where a row's draws sit in their batch, so in the key.


def view_seed(seed: int) -> int:
  """The seed of the views' draws: apart from training's batches under the same --seed."""
  return stream_id(seed, "embedding/views") & 0xFFFFFFFF


class Views:
  """The views of a training split's rows: its files (cached, `split`), then its _silence_ rows.

  Args:
    params: the run's parameters (its augmentations, seed, clip length).
    split: the clip split of the rows that are files, as cached.
    labels: each row's label id (files first, then _silence_ rows).
    recordings, rirs: background noise and impulse responses (as input_fn's
      sampler gets them), None for white noise and synthetic responses.
    silence_label: the _silence_ label's id where the split has such rows.
    num_classes: the labels' count.
  """

  def __init__(self, params: Params, split: cache_format.Split, labels: np.ndarray, *,
               recordings=None, rirs=None, silence_label: Optional[int] = None,
               num_classes: int):
    self.rows = len(labels)
    self.files = len(split.lengths)
    self.chunks = -(-self.rows // CHUNK)
    self._split, self._labels = split, np.asarray(labels, np.int32)
    self._n = params.clip_samples
    self._params = params.replace(seed=view_seed(params.seed), batch_size=CHUNK,
                                  mixup_alpha=0.0, balanced_sampler=False)
    self._sampler = Sampler(self._params, self.rows, recordings=recordings,
                            silence_label=silence_label, labels=self._labels,
                            num_classes=num_classes, rirs=rirs)

  def batch(self, view: int, chunk: int) -> tuple[np.ndarray, tf.Tensor]:
    """(rows, float32 waveforms [len(rows), clip_samples]): view `view` of the rows of `chunk`."""
    padded = np.arange(chunk * CHUNK, (chunk + 1) * CHUNK)
    rows = padded[padded < self.rows]
    files = padded < self.files
    lengths = np.where(files, self._split.lengths[np.minimum(padded, self.files - 1)], 0)
    number = view * self.chunks + chunk  # The batch number of its draws.
    u = None
    if view:
      u = self._sampler.window_draws(number)
    starts = np.asarray(self._sampler.start(u, tf.constant(lengths)))
    waves = np.zeros((CHUNK, self._n), np.float32)
    if files.any():
      waves[files] = self._split.windows(padded[files], starts[files], self._n)
    # Padding rows take label -1: no _silence_ noise, and they are dropped below.
    labels = np.where(padded < self.rows, self._labels[np.minimum(padded, self.rows - 1)], -1)
    waves, _ = self._sampler.augment(tf.constant(waves), tf.constant(labels, tf.int32), number,
                                     training=view > 0)
    return rows, waves[:len(rows)]
