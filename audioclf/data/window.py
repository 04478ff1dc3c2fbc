"""Where a clip's window lies, how it is cut, and its label: one cut for every path of input_fn.

The cold pass (a decoded clip), the warm cuts (the memory-mapped split, per
example or, in numpy, per batch), a tf.data service worker and predict all
place a window with `start` and label it with `labels`; the TensorFlow paths
cut it with `cut`, the numpy one with its twin `cache_format.cut_windows` (the same
copy: the same bits).
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.data import cache_format


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


def start(u, length, n: int, shift: int):
  """A window's start: training's drawn by `u` (`window_start`), or with u None the centre."""
  if u is None:
    return center_start(tf.cast(length, tf.int64), n)
  return window_start(u, length, n, shift)


def cut(source: tf.Tensor, offset, length, start_, n: int) -> tf.Tensor:
  """Samples [start, start + n) of the clip at source[offset:offset + length], zero outside it.

  Scalars give one window [n], vectors a batch [batch, n]. One window is a
  slice padded (a 5 s clip is never padded to cut 1 s); a batch is one
  gather of batch x n indices.
  """
  source = tf.convert_to_tensor(source)
  length, start_ = (tf.cast(x, tf.int64) for x in (length, start_))
  if start_.shape.rank == 0:
    return _one(source, offset, length, start_, n)
  offset = tf.cast(offset, tf.int64)
  at = start_[:, None] + tf.range(n, dtype=tf.int64)[None, :]
  inside = (at >= 0) & (at < length[:, None])
  return tf.where(inside, tf.gather(source, offset[:, None] + tf.clip_by_value(
      at, 0, tf.maximum(length[:, None] - 1, 0))), tf.zeros([], source.dtype))


def _one(source, offset, length, start_, n: int) -> tf.Tensor:
  # Few ops: this runs per example, and building a dataset traces it.
  lo = tf.minimum(tf.maximum(start_, 0), length)
  hi = tf.minimum(tf.maximum(start_ + n, lo), length)
  # A window wholly past either end of its clip has lo == hi: it is all padding.
  left = tf.minimum(tf.maximum(lo - start_, 0), n)
  if isinstance(offset, int) and offset == 0:  # A decoded clip (the cold pass): no adds.
    piece = source[lo:hi]
  else:
    offset = tf.cast(offset, tf.int64)
    piece = source[offset + lo:offset + hi]
  return tf.ensure_shape(tf.pad(piece, tf.reshape(tf.stack([left, n - left - (hi - lo)]), [1, 2])),
                         [n])


SKIPPED_LABEL = -1  # The label of an example whose file was skipped as bad: filters drop it.


def decoded(samples: tf.Tensor, u, n: int, shift: int) -> tuple[tf.Tensor, tf.Tensor]:
  """(window, length) of a decoded clip (offset 0): at `start(u, ...)`, or with u None its centre.

  Traced once per (n, shift) and process (`_traced`): the cold pass builds
  it into the function every example runs.
  """
  if u is None:
    return _traced(n, shift, False)(samples)
  return _traced(n, shift, True)(samples, u)


@functools.lru_cache(maxsize=None)
def _traced(n: int, shift: int, training: bool):
  samples = tf.TensorSpec([None], tf.float32)

  def cut_clip(source, u=None):
    length = tf.size(source, out_type=tf.int64)
    return cut(source, 0, length, start(u if training else None, length, n, shift), n), length

  signature = [samples, tf.TensorSpec([], tf.float64)] if training else [samples]
  return tf.function(cut_clip, input_signature=signature, autograph=False)


def labels(rows, lengths, row_labels: tf.Tensor, files: int) -> tf.Tensor:
  """Each row's label, SKIPPED_LABEL for a file skipped as bad (`cache_format.SKIPPED_LENGTH`).

  Rows from `files` on are virtual _silence_ clips, empty and kept.
  """
  kept = tf.not_equal(lengths, cache_format.SKIPPED_LENGTH)
  if files < row_labels.shape[0]:  # Ops run per example in the cold pass: none without silence.
    kept |= rows >= files
  return tf.where(kept, tf.gather(row_labels, rows), SKIPPED_LABEL)


def row_table(split: cache_format.Split, row_labels: np.ndarray) -> tf.Tensor:
  """int64 [rows, 3]: each row's offset, length and label (`labels`) in `split`: one gather each.

  `row_labels` may run past the split's files: those virtual _silence_ rows
  are empty clips.
  """
  virtual = len(row_labels) - len(split.lengths)
  offsets = np.concatenate([split.offsets, np.zeros(virtual, np.int64)])
  lengths = np.concatenate([split.lengths, np.zeros(virtual, np.int64)])
  kept = np.concatenate([split.kept, np.ones(virtual, bool)])
  return tf.constant(np.stack([offsets, lengths, np.where(kept, row_labels, SKIPPED_LABEL)],
                              1).astype(np.int64))


def split_tensor(split: cache_format.Split) -> tuple[tf.Tensor, Optional[float]]:
  """A cache split's samples as one tensor (the `source` of `cut`), and the scale to float.

  Memory-mapped: the page cache is the only copy. PCM16 splits come as int16
  with libsndfile's scale (exact, a power of two) to apply once per batch.
  """
  dtype = source_dtype(split)
  if split.samples:
    source = tf.raw_ops.ImmutableConst(dtype=dtype, shape=[split.samples],
                                       memory_region_name=split.data_path)
  else:
    source = tf.zeros([0], dtype)
  return source, scale_of(split)


def source_dtype(split: cache_format.Split) -> tf.DType:
  """The TensorFlow dtype of a split's samples as cached."""
  return tf.int16 if split.dtype == cache_format.PCM16 else tf.float32


def scale_of(split: cache_format.Split) -> Optional[float]:
  """What turns the split's cached samples into float32: PCM16's scale, or None."""
  return cache_format.PCM16_SCALE if split.dtype == cache_format.PCM16 else None
