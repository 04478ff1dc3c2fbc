"""DS-CNN of Zhang et al. 2017, "Hello Edge: Keyword Spotting on Microcontrollers"."""

from __future__ import annotations

import tensorflow as tf

from audioclf.compat import keras
from audioclf.model.layers import batch_norm, conv_bn_relu


def ds_cnn(spectrogram: tf.Tensor, params, *, width: int = 64, blocks: int = 4) -> tf.Tensor:
  """A strided 10x4 convolution, then depthwise-separable blocks of `width` filters, then pooling.

  64 filters and 4 blocks are the paper's DS-CNN-S.

  Args:
    spectrogram: log-mel [batch, frames, n_mels, 1].
    params: the run's Params (unused).
    width: filters of every layer.
    blocks: depthwise-separable blocks.
  """
  del params
  layers = keras.layers
  x = conv_bn_relu(spectrogram, width, (10, 4), strides=2, name="stem_")
  for i in range(blocks):
    x = layers.DepthwiseConv2D(3, padding="same", use_bias=False, name=f"ds{i}_depthwise")(x)
    x = batch_norm(f"ds{i}_depthwise_bn")(x)
    x = layers.ReLU(name=f"ds{i}_depthwise_relu")(x)
    x = conv_bn_relu(x, width, 1, name=f"ds{i}_pointwise_")
  return layers.GlobalAveragePooling2D(name="pool")(x)


def search_space(hp) -> dict:
  """The tuner's choices of width and depth."""
  return {"width": hp.Choice("width", [16, 32, 64]), "blocks": hp.Choice("blocks", [2, 4])}
