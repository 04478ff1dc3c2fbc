"""Which clip comes when, and every random draw: pure functions of (seed, global example index).

Training reads an endless stream of examples numbered g = 0, 1, 2, ...; batch
k holds examples k*B ... k*B + B - 1. Example g is in epoch g // n at
position g % n, and reads row `index_shuffle(g % n, (seed, epoch))` of the
split: a fresh permutation every epoch, computed per index as Grain's
samplers do (`tf.random.experimental.index_shuffle`), so nothing bigger than
a batch of numbers is ever held, and example g can be computed without
0 .. g-1. The draws of batch k (each window's offset and time shift; the
noise choice, level and samples) are keyed by (seed, k), so those of example
g are a pure function of (seed, g) for a given batch size. A batch is a pure
function of (seeds, k, the cached clips): the cold pass (which meets examples
one by one, `example`), the warm cut (a batch at a time, `batch`), a resume
at step k and any parallelism give the same bits.

Evaluation reads rows 0 .. n-1 in order and takes each clip's centre window,
as predict does (`center_start`). Its only noise is that of the _silence_
clips, drawn per evaluation batch from keys of their own: every evaluation
of a split sees the same silence clips.

These are TensorFlow ops on tensors of any shape, used by the pipeline, by
predict and by the benchmarks: the draws are written here and nowhere else.
"""

from __future__ import annotations

import os
from typing import Optional

import tensorflow as tf

from audioclf.data import store as store_lib
from audioclf.params import Params


def center_start(length, n: int):
  """Where the centre window of `n` samples starts in a clip of `length`; 0 for a short clip."""
  return tf.maximum(length - n, 0) // 2


def window_start(u, length, n: int, shift: int):
  """A training window's start: uniform over [-shift, max(length - n, 0) + shift] by `u` in [0, 1).

  The window may begin up to `shift` samples before the clip and end up to
  `shift` after it (time shift); a clip longer than the window is cut at a
  random offset. int64, elementwise.
  """
  span = tf.maximum(tf.cast(length, tf.int64) - n, 0) + (2 * shift + 1)
  # float64 -> int64 truncates, which is floor for u * span >= 0.
  return tf.minimum(tf.cast(u * tf.cast(span, tf.float64), tf.int64), span - 1) - shift


def window(source: tf.Tensor, offset, length, start, n: int) -> tf.Tensor:
  """Samples [start, start + n) of the clip at source[offset:offset + length], zero outside it.

  Slices first and pads only the slice: a 5 s clip is never padded to cut 1 s.
  The cold pass cuts decoded clips (offset 0) and the warm pass the
  memory-mapped split with it, so both give the same samples.
  """
  # Few ops: this runs per example, and building a dataset traces it.
  source = tf.convert_to_tensor(source)
  offset, length, start = (tf.cast(x, tf.int64) for x in (offset, length, start))
  lo = tf.minimum(tf.maximum(start, 0), length)
  hi = tf.minimum(tf.maximum(start + n, lo), length)
  # A window wholly past either end of its clip has lo == hi: it is all padding.
  left = tf.minimum(tf.maximum(lo - start, 0), n)
  piece = source[offset + lo:offset + hi]
  return tf.ensure_shape(tf.pad(piece, tf.reshape(tf.stack([left, n - left - (hi - lo)]), [1, 2])),
                         [n])


# White noise where there are no background recordings: its level only
# matters for _silence_ clips, whose gain is absolute (-20 dBFS at most).
WHITE_RMS = 0.1


def split_tensor(split) -> tuple[tf.Tensor, Optional[float]]:
  """A cache split's samples as one tensor (the `source` of `window`), and the scale to float.

  Memory-mapped: the page cache is the only copy. PCM16 splits come as int16
  with libsndfile's scale (exact, a power of two) to apply once per batch.
  """
  dtype = tf.int16 if split.dtype == "<i2" else tf.float32
  if split.samples:
    source = tf.raw_ops.ImmutableConst(dtype=dtype, shape=[split.samples],
                                       memory_region_name=split.data_path)
  else:
    source = tf.zeros([0], dtype)
  return source, (store_lib.PCM16_SCALE if dtype == tf.int16 else None)


class Sampler:
  """The order and draws of one training or evaluation stream over a split of `n` clips.

  With `shard` (index, count), the stream is one worker's share: of every
  epoch's permutation, the positions index, index + count, ... (so the shards
  of an epoch hold each file once between them); `epoch_size` is that share's
  size, and the draws are keyed apart per shard. (0, 1) is the whole split.

  `recordings` (noise.Recordings) are the background recordings to mix in,
  None for white noise; `silence_label` is the label id of the _silence_
  clips, which always get noise, at a gain drawn from [0, 1) of the
  recording's own level (as Speech Commands' recipe does), None without any.
  """

  def __init__(self, params: Params, n: int, shard: Optional[tuple[int, int]] = None,
               recordings=None, silence_label: Optional[int] = None):
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
    self.seed = int(params.seed)
    self.noise_prob, self.snr_db = params.noise_prob, params.noise_snr_db
    self.recordings, self.silence_label = recordings, silence_label

  def mixes(self, training: bool) -> bool:
    """Whether batches of this stream get noise (`add_noise`) at all."""
    return (training and self.noise_prob > 0) or self.silence_label is not None

  def batch(self, k) -> tuple[tf.Tensor, tf.Tensor]:
    """Training batch k: (its split rows int64 [B], u float64 [B] uniform in [0, 1)).

    `u` picks each window's start once the clip's length is known
    (`window_start`): the cold pass knows it only after decoding.
    """
    k = tf.cast(k, tf.int64)
    g = k * self.batch_size + tf.range(self.batch_size, dtype=tf.int64)
    epoch = g // self.epoch_size
    # A batch no larger than an epoch spans at most two of them.
    rows = tf.where(tf.equal(epoch, epoch[0]), self._row(g, epoch[0]), self._row(g, epoch[0] + 1))
    return rows, self._uniform(k)

  def example(self, g) -> tuple[tf.Tensor, tf.Tensor]:
    """Training example g alone (a scalar): what `batch(g // B)` gives it, bit for bit."""
    g = tf.cast(g, tf.int64)
    return (self._row(g, g // self.epoch_size),
            self._uniform(g // self.batch_size)[g % self.batch_size])

  def eval_rows(self) -> range:
    """Evaluation's rows, in order: this shard's share."""
    index, count = self.shard
    return range(index, self.n, count)

  def _row(self, g, epoch):
    index, count = self.shard
    position = index + (g % self.epoch_size) * count  # In the whole epoch's permutation.
    return tf.random.experimental.index_shuffle(
        position, tf.stack([tf.constant(self.order_seed, tf.int64), epoch]), self.n - 1)

  def _uniform(self, k):
    return tf.random.stateless_uniform([self.batch_size], self._key(0, k), dtype=tf.float64)

  def train_start(self, u, length):
    return window_start(u, length, self.clip_samples, self.shift)

  def eval_start(self, length):
    return center_start(tf.cast(length, tf.int64), self.clip_samples)

  def add_noise(self, waves: tf.Tensor, labels: tf.Tensor, k, training: bool = True) -> tf.Tensor:
    """Noise under the examples of batch k ([batch, clip_samples] float32; labels [batch]).

    Training: each example, with chance noise_prob, gets an excerpt of a
    background recording (or white noise) at a signal-to-noise ratio drawn
    uniformly from noise_snr_db, against the recording's level; a _silence_
    clip always gets one, at a gain drawn from [0, 1). Evaluation: only the
    _silence_ clips.
    """
    k = tf.cast(k, tf.int64)
    size = tf.shape(waves)[:1]
    stream = 1 if training else 3  # Evaluation draws apart from training's, whatever k.
    pick, level, which, where, gain = tf.unstack(tf.random.stateless_uniform(
        tf.concat([[5], size], 0), self._key(stream, k), dtype=tf.float64))
    silence = (tf.equal(labels, self.silence_label) if self.silence_label is not None
               else tf.zeros(size, tf.bool))
    chosen = (silence | (pick < self.noise_prob)) if training else silence
    if self.recordings is not None:
      noise = self.recordings.excerpts(which, where, self.clip_samples)
      # The level of the recording, not of the excerpt: a quiet passage stays quiet.
      noise_rms = self.recordings.rms(which)
    else:
      noise = WHITE_RMS * tf.random.stateless_normal(tf.shape(waves), self._key(stream + 1, k))
      noise_rms = WHITE_RMS
    low, high = self.snr_db
    snr_db = tf.cast(low + level * (high - low), tf.float32)
    rms = tf.sqrt(tf.reduce_mean(tf.square(waves), axis=-1) + 1e-12)
    scale = tf.where(silence, tf.cast(gain, tf.float32), rms / (noise_rms * 10.0 ** (snr_db / 20.0)))
    return waves + (scale * tf.cast(chosen, tf.float32))[:, None] * noise

  def _key(self, stream: int, k: tf.Tensor) -> tf.Tensor:
    # Streams apart by a large stride, shards by k: each draw has its own keys.
    index, count = self.shard
    return tf.stack([tf.constant(self.seed * 8 + stream, tf.int64), k * count + index])

