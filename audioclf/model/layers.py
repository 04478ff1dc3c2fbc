"""Building blocks the built-in bodies share, and a user's body may use: batch norm, conv-BN-ReLU."""

from __future__ import annotations

import tensorflow as tf

from audioclf import compat
from audioclf.compat import keras


def batch_norm(name: str):
  """audioclf's batch normalization: momentum 0.9, and synchronized under several replicas.

  Momentum 0.9 (PyTorch's default), not Keras' 0.99: after N steps the moving
  variance still holds 0.99**N of its initial 1.0, which swamps the real
  statistic of a deep layer whose activations vary by 0.002 for several
  hundred steps; a DS-CNN trained fine yet scored at chance in inference mode.
  Under several replicas (tf.distribute), statistics of the global batch:
  every replica keeps the same moving statistics, so each evaluates (and the
  checkpoint holds) what one process training that batch would.
  compat.BatchNormalization trains through TensorFlow's fused kernel on Keras 3.
  """
  several = tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1
  return compat.BatchNormalization(momentum=0.9, synchronized=several, name=name)


def conv_bn_relu(x, filters: int, kernel, strides=1, name: str = ""):
  """Conv2D without bias (batch norm's mean cancels it), batch norm, ReLU; layers named name+..."""
  x = keras.layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False,
                          name=f"{name}conv")(x)
  x = batch_norm(f"{name}bn")(x)
  return keras.layers.ReLU(name=f"{name}relu")(x)
