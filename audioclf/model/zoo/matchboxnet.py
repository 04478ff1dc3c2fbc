"""MatchboxNet (Majumdar and Ginsburg 2020), of 1D time-channel separable convs, as a body."""

from __future__ import annotations

import tensorflow as tf

from audioclf.compat import keras
from audioclf.model.layers import batch_norm

layers = keras.layers

PROLOGUE_KERNEL = 11
BLOCK_KERNELS = (13, 15, 17)
EPILOGUE_KERNEL = 29
EPILOGUE_DILATION = 2


def matchboxnet(spectrogram: tf.Tensor, params, *, blocks: int = 3, repeats: int = 2,
                channels: int = 64) -> tf.Tensor:
  """MatchboxNet-BxRxC of Majumdar and Ginsburg 2020 (arXiv:2004.08531): 3x2x64 by default.

  The mel bands are the channels of 1D convolutions over time. Taken from
  the paper: a prologue Conv1 (kernel 11, 128 channels); B residual blocks
  of R sub-blocks of C channels, each sub-block a time-channel separable
  conv (a depthwise conv over time, then a 1x1 conv, no nonlinearity
  between), BN and ReLU, kernels 13, 15 and 17 for blocks 1 to 3; the
  block's residual, a 1x1 conv and BN of its input, added before the last
  ReLU; an epilogue of Conv2 (kernel 29, dilation 2, 128 channels) and Conv3
  (1x1, 128 channels), then a global average over time. From the authors'
  NeMo configuration (examples/asr/conf/matchboxnet): Conv1 and Conv2 are
  separable too, Conv1's stride is 1, and the residual's 1x1 conv is there
  in every block, widths equal or not; with 64 MFCCs, 128 frames and 35
  classes these give the published 93k parameters and, within 2%, the
  11.3M multiplies Kim et al. 2021 (BC-ResNet, Table 3) list for it.

  Changed: the 1D convolutions run over a [batch, frames, 1, n_mels] tensor
  as 2D ones with (k, 1) kernels: the same weights and numbers as Conv1D's
  over [batch, frames, n_mels], but BatchNormalization then trains through
  TensorFlow's fused kernel, and TFLite folds it into the convolution before
  it. Conv1 to Conv3
  have 2 * C channels (128 at the paper's C = 64), so `channels` widens the
  whole model; block kernels for B != 3 are spread over 13, 15 and 17
  (B = 6 gives 13, 13, 15, 15, 17, 17); the classes' Conv4 is the Dense head
  build_model adds; no dropout inside the blocks (the published
  configuration trains with 0.0; build_model's --dropout acts before the
  head); BN momentum 0.9 as in audioclf's other bodies.

  Args:
    spectrogram: log-mel [batch, frames, n_mels, 1], time first.
    params: the run's Params (unused: the body's hyperparameters are its
      keyword arguments).
    blocks: B, the residual blocks.
    repeats: R, the sub-blocks in each block.
    channels: C, the width of every sub-block.

  Returns:
    Pooled features [batch, 2 * channels].

  Raises:
    ValueError: blocks, repeats or channels below 1.
  """
  del params
  if min(blocks, repeats, channels) < 1:
    raise ValueError(f"matchboxnet needs blocks, repeats and channels >= 1, got blocks={blocks}, "
                     f"repeats={repeats}, channels={channels}")
  x = layers.Reshape((-1, 1, spectrogram.shape[2]), name="mels_as_channels")(spectrogram)
  x = _separable_bn_relu(x, 2 * channels, PROLOGUE_KERNEL, name="prologue_")
  for block in range(blocks):
    kernel = BLOCK_KERNELS[len(BLOCK_KERNELS) * block // blocks]
    x = _residual_block(x, channels, kernel, repeats, name=f"block{block}_")
  x = _separable_bn_relu(x, 2 * channels, EPILOGUE_KERNEL, dilation=EPILOGUE_DILATION,
                         name="epilogue_dilated_")
  x = layers.Conv2D(2 * channels, 1, use_bias=False, name="epilogue_pointwise_conv")(x)
  x = batch_norm("epilogue_pointwise_bn")(x)
  x = layers.ReLU(name="epilogue_pointwise_relu")(x)
  return layers.GlobalAveragePooling2D(name="pool")(x)


def search_space(hp) -> dict:
  """The keyword arguments a keras-tuner trial builds matchboxnet with: the paper's variants."""
  return {"blocks": hp.Choice("blocks", [3, 6]),
          "repeats": hp.Choice("repeats", [1, 2]),
          "channels": hp.Choice("channels", [64, 128])}


def _residual_block(x, channels, kernel, repeats, name):
  shortcut = layers.Conv2D(channels, 1, use_bias=False, name=f"{name}residual_conv")(x)
  shortcut = batch_norm(f"{name}residual_bn")(shortcut)
  for repeat in range(repeats):
    x = layers.SeparableConv2D(channels, (kernel, 1), padding="same", use_bias=False,
                               name=f"{name}sub{repeat}_conv")(x)
    x = batch_norm(f"{name}sub{repeat}_bn")(x)
    if repeat == repeats - 1:
      x = layers.Add(name=f"{name}add")([x, shortcut])
    x = layers.ReLU(name=f"{name}sub{repeat}_relu")(x)
  return x


def _separable_bn_relu(x, filters, kernel, dilation=1, name=""):
  # No bias before batch norm: the mean it subtracts cancels it.
  # A depthwise conv over time, then a 1x1 conv across the channels: no BN between.
  x = layers.SeparableConv2D(filters, (kernel, 1), dilation_rate=(dilation, 1), padding="same",
                             use_bias=False, name=f"{name}conv")(x)
  x = batch_norm(f"{name}bn")(x)
  return layers.ReLU(name=f"{name}relu")(x)
