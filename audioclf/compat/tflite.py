"""The TensorFlow Lite interpreter of each stack: LiteRT's on the current one, tf.lite's on the legacy."""

from __future__ import annotations

import tensorflow as tf


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
