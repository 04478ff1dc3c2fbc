"""The TensorFlow Lite interpreter of each stack (LiteRT's on the current one, tf.lite's on the legacy), and a Keras model with constant weights for the converter."""

from __future__ import annotations

from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from audioclf.compat.stack import KERAS3


def tflite_interpreter(model_content: bytes):
  """A TensorFlow Lite interpreter for a model: LiteRT's where installed, else tf.lite's.

  TF 2.21 deprecates tf.lite.Interpreter for LiteRT (ai-edge-litert), which the
  current stack installs; the legacy stack runs TF 2.15's own. Chosen by what
  imports, so a legacy venv with LiteRT added uses it too.
  """
  try:
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
  except ImportError:
    Interpreter = tf.lite.Interpreter  # pylint: disable=invalid-name
  return Interpreter(model_content=model_content)


def constant_call(model: keras.Model) -> Callable:
  """`model` in inference mode as a function whose weights are constants, for a tf.Module that TFLite converts.

  Keras 3's variables, read inside such a module's function, reach TFLite as
  resource variables no one initializes (its outputs come out NaN); its
  stateless_call takes the weights as tensors instead. Keras 2's variables
  are frozen by the converter as they are.
  """
  if not KERAS3:
    return lambda x: model(x, training=False)
  trainable = [tf.constant(np.asarray(v)) for v in model.trainable_variables]
  non_trainable = [tf.constant(np.asarray(v)) for v in model.non_trainable_variables]
  return lambda x: model.stateless_call(trainable, non_trainable, x, training=False)[0]
