"""A small VGG-style CNN: the demo's model."""

from __future__ import annotations

import tensorflow as tf

from audioclf.compat import keras
from audioclf.model.layers import conv_bn_relu


def cnn(spectrogram: tf.Tensor, params, *, width: int = 64) -> tf.Tensor:
  """Three conv/pool blocks of width, 2 x width and 2 x width filters, an average over time, flatten.

  Averaging over time only keeps where in frequency the energy sits: a
  global average would leave a model of 3x3 kernels blind to pitch, except
  through the zero padding at the band edges.

  Args:
    spectrogram: log-mel [batch, frames, n_mels, 1].
    params: the run's Params (unused).
    width: filters of the first block.
  """
  del params
  x = spectrogram
  for i, filters in enumerate((width, 2 * width, 2 * width)):
    x = conv_bn_relu(x, filters, 3, name=f"block{i}_")
    x = keras.layers.MaxPool2D(2, padding="same", name=f"block{i}_pool")(x)
  # The clip length is fixed, so the frame count is static: pool it all.
  x = keras.layers.AveragePooling2D(pool_size=(x.shape[1], 1), name="time_pool")(x)
  return keras.layers.Flatten(name="flatten")(x)


def search_space(hp) -> dict:
  """The tuner's choices of width."""
  return {"width": hp.Choice("width", [8, 16, 32, 64])}
