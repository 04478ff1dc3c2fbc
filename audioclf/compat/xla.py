"""XLA where it is fast and quiet: compiled by XLA on the current stack, plain ops on the legacy one.

XLA fuses the dozens of elementwise steps of an augmentation into a few
loops (tf.function(jit_compile=True), eagerly and inside tf.data alike). The
legacy stack's XLA (TensorFlow 2.15) is no use to the augmentations: its CPU
FFTs are not the ducc library TensorFlow's own FFT ops use but a path many
times slower than those ops, so the augmentations run slower under it than
as plain ops. It also prints notes on stderr at first use: absl's
"Compiled cluster using XLA!" once a process whatever TF_CPP_MIN_LOG_LEVEL
says, and at level 2 (errors kept) "SetPriority unimplemented for this
stream" for every stream its launches add, which a quiet command cannot
have. There the same functions run as the TensorFlow ops they are.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from audioclf.compat.stack import CURRENT_STACK, STACK

XLA: bool = STACK == CURRENT_STACK


def compiled(fn: Callable) -> Callable:
  """`fn` compiled by XLA on the current stack (its Python arguments static), itself on the legacy."""
  # As written: its Python never branches on a tensor (AutoGraph would only cost time).
  return tf.function(fn, jit_compile=True, autograph=False) if XLA else fn


def materialized(x: tf.Tensor) -> tf.Tensor:
  """`x`, written out whole before what reads it, under XLA (itself on the legacy stack).

  XLA's CPU compiler fuses the computation of a tensor into a gather that
  reads rows of it, and then computes each element it gathers on the spot
  through indices it cannot vectorize (mixup's gather of partners right
  after a resampling costs more than the two apart). A scatter of one row onto itself is an op XLA does not fuse into what
  reads it, so the tensor is computed once, in place, at the cost of one row.
  """
  if not XLA:
    return x
  return tf.tensor_scatter_nd_update(x, [[0]], x[:1])
