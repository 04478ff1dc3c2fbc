"""A batch's augmentations as one program: each a Step (its op and its draws), run in turn by `apply`.

`on_rows` runs an op on the chosen examples only, so an augmentation that
touches few examples costs what those cost.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import tensorflow as tf

from audioclf.compat import xla as compat_xla


class Step(NamedTuple):
  """One augmentation of a batch, for `apply`: fn(waves, *tensors, **dict(static)) -> waves.

  `tensors` are its draws (and any tensor it reads, such as a bank of
  responses), `static` the Python values it is built for, as (name, value)
  pairs. With `labels`, fn(waves, labels, *tensors, **dict(static)) ->
  (waves, labels): mixup's soft labels.
  """
  fn: Callable
  tensors: tuple
  static: tuple = ()
  labels: bool = False


def apply(waves: tf.Tensor, labels: Optional[tf.Tensor], steps) -> tuple:
  """(waves, labels) after each of `steps` in turn: one XLA program on the current stack.

  One program for all the augmentations of a batch: from one step to the
  next XLA updates the batch in place, where a program per step costs a
  copy of the batch and a dispatch each. Steps of the same functions and
  static values share one compilation, whatever their draws; no steps: the
  batch as it is.
  """
  if not steps:
    return waves, labels
  return _apply(waves, labels, tuple((s.fn, s.static, s.labels) for s in steps),
                tuple(s.tensors for s in steps))


@compat_xla.compiled
def _apply(waves, labels, fns, tensors):
  for (fn, static, with_labels), values in zip(fns, tensors):
    if with_labels:
      waves, labels = fn(waves, labels, *values, **dict(static))
    else:
      waves = fn(waves, *values, **dict(static))
  return waves, labels


# Rows an augmentation of chosen examples transforms at once: its shapes stay
# static (one XLA compilation per size, whatever the number chosen), and few
# rows are transformed twice: chunks of _CHUNK, the last one of _TAIL when
# that covers what is left.
_CHUNK, _TAIL = 8, 4


def on_rows(fn, waves: tf.Tensor, chosen: tf.Tensor, *values: tf.Tensor) -> tf.Tensor:
  """`waves` with its `chosen` rows (bool [batch]) replaced by fn(those rows, *their `values`).

  Only the chosen examples cost their FFTs, and none chosen costs none.
  Under XLA, _CHUNK rows at a time, the last chunk (_TAIL rows where at most
  that many are left: 1.5 rows wasted on average, not 3.5) filled up with
  repeats of the last chosen row (the same bits, written twice); plain ops
  take them all at once. Each chunk reads its rows from the batch being
  updated, where no chunk before wrote them: each loop carries that one
  batch, which XLA updates in place, where reading `waves` too would cost a
  copy of it.
  """
  if not compat_xla.XLA:
    rows = tf.where(chosen)[:, 0]
    # None chosen: the batch as it is (RFFT refuses an empty batch it has to pad).
    return tf.cond(tf.size(rows) > 0, lambda: tf.tensor_scatter_nd_update(
        waves, rows[:, None], fn(tf.gather(waves, rows), *(tf.gather(v, rows) for v in values))),
                   lambda: waves)
  count = tf.reduce_sum(tf.cast(chosen, tf.int32))
  order = tf.argsort(tf.cast(tf.logical_not(chosen), tf.int32), stable=True)  # Chosen first.

  def chunks(size):
    def chunk(start, out):
      rows = tf.gather(order, tf.minimum(start + tf.range(size), count - 1))
      new = fn(tf.gather(out, rows), *(tf.gather(v, rows) for v in values))
      return start + size, tf.tensor_scatter_nd_update(out, rows[:, None], new)
    return chunk

  # Two loops, not a cond in one: a conditional would copy the batch at every chunk.
  start, out = tf.while_loop(lambda start, _: count - start > _TAIL, chunks(_CHUNK),
                             (tf.constant(0), waves))
  return tf.while_loop(lambda start, _: start < count, chunks(_TAIL), (start, out))[1]

def scale_step(scale: float) -> Step:
  """int16 samples to float32 (times `scale`) as a Step: the program's first, fused into its first pass."""
  return Step(_scaled, (), (("scale", float(scale)),))


def _scaled(waves, scale: float):
  # Written out whole: fused into the passes that follow, the conversion
  # changed how XLA vectorized their sums (float rounding of 1 in 4% of a
  # noisy batch's samples), and the cold pass's float batches must give the same bits.
  return compat_xla.materialized(tf.cast(waves, tf.float32) * scale)
