"""XLA where it runs quietly: functions compiled by XLA on the current stack, plain ops on the legacy one.

XLA fuses the dozens of elementwise steps of an augmentation into a few
loops (tf.function(jit_compile=True), eagerly and inside tf.data alike). The
legacy stack's XLA (TensorFlow 2.15) prints its compiler's notes on stderr at
every first use, whatever TF_CPP_MIN_LOG_LEVEL says, which a quiet command
cannot have: there the same functions run as the TensorFlow ops they are.
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
