"""BC-ResNet (Kim et al. 2021), a broadcasted-residual keyword spotter, as an audioclf body."""

from __future__ import annotations

import tensorflow as tf

from audioclf.compat import keras
from audioclf.model.layers import batch_norm, conv_bn_relu

layers = keras.layers

# (blocks, channels at scale 1, frequency stride of the first block, temporal dilation)
# per stage: the paper's Table 1.
STAGES = ((2, 8, 1, 1), (2, 12, 2, 2), (4, 16, 2, 4), (4, 20, 1, 8))
STEM_CHANNELS = 16
HEAD_CHANNELS = 32


def bc_resnet(spectrogram: tf.Tensor, params, *, scale: int = 1, sub_bands: int = 5,
              block_dropout: float = 0.1) -> tf.Tensor:
  """BC-ResNet-`scale` of Kim et al. 2021, "Broadcasted Residual Learning for Efficient KWS".

  Taken from the paper (arXiv:2106.04140, section 2 and Table 1): a 5x5
  conv stem with frequency stride 2 (16 channels), then four stages of 2, 2,
  4 and 4 BC-ResBlocks of 8, 12, 16 and 20 channels whose temporal
  convolutions dilate by 1, 2, 4 and 8, the second and third stage halving
  frequency in their first block; then a 5x5 depthwise conv without
  frequency padding, a 1x1 conv to 32 channels with BN and ReLU, and an
  average pool. Every width is multiplied by `scale` (the paper's tau: 1 is
  BC-ResNet-1, 8 is BC-ResNet-8). A block is y = x + f2(x) +
  BC(f1(avgpool_freq(f2(x)))): f2 a 3x1 frequency-depthwise conv with
  SubSpectralNorm of 5 sub-bands, f1 a temporal depthwise conv, BN, swish,
  a 1x1 conv and channel dropout (p = 0.1). A transition block (where the
  width changes) first runs a 1x1 conv, BN and ReLU, and has no identity
  shortcut. From the authors' code (github.com/Qualcomm-AI-research/bcresnet):
  a ReLU after each block's sum, SubSpectralNorm as a BatchNorm over
  channels x sub-bands with an affine pair each, bias-free convolutions.

  Changed: the paper writes frequency x time; here time is axis 1 and
  frequency axis 2, so its 3x1 frequency kernel is (1, 3) here, its stride
  (2, 1) is (1, 2), and so on. The final 1x1 conv to the classes is the
  Dense head build_model adds. BN momentum is 0.9 as in audioclf's other
  bodies (PyTorch's default, which the authors trained with), and Keras'
  epsilon 1e-3 for PyTorch's 1e-5. The final depthwise kernel spans
  min(5, bands left) frequency bands, so fewer than 40 mels still build.

  Sizes, 12 classes: BC-ResNet-1 has 9,232 weights (the paper's 9.2k) and
  BC-ResNet-8 321,068 (321k); on 98 frames of 40 mels their conv and dense
  layers take 2.4M and 83M multiply-adds (the paper: 3.1M and 89.1M
  multiplies on 101 frames, its count apparently with BN's).

  Args:
    spectrogram: log-mel [batch, frames, n_mels, 1], time first.
    params: the run's Params (unused: the body's hyperparameters are its
      keyword arguments).
    scale: width multiplier tau, a positive integer.
    sub_bands: SubSpectralNorm's frequency groups; 1 is plain BatchNorm
      (the paper's "w/o SSN"). It must divide the frequency size at every
      stage: n_mels 40 leaves 20, 10 and 5 bands.
    block_dropout: the channel-wise dropout rate inside every block.

  Returns:
    Pooled features [batch, 32 * scale].

  Raises:
    ValueError: scale or sub_bands below 1, or sub_bands not dividing a
      stage's frequency size.
  """
  del params
  if scale < 1 or sub_bands < 1:
    raise ValueError(f"bc_resnet needs scale >= 1 and sub_bands >= 1, got scale={scale}, "
                     f"sub_bands={sub_bands}")
  x = conv_bn_relu(spectrogram, STEM_CHANNELS * scale, 5, strides=(1, 2), name="stem_")
  for stage, (blocks, channels, stride, dilation) in enumerate(STAGES):
    for block in range(blocks):
      x = _bc_res_block(x, channels * scale, stride if block == 0 else 1, dilation, sub_bands,
                        block_dropout, name=f"stage{stage}_block{block}_")
  return _head(x, HEAD_CHANNELS * scale)


def search_space(hp) -> dict:
  """The keyword arguments a keras-tuner trial builds bc_resnet with: the paper's integer widths."""
  return {"scale": hp.Choice("scale", [1, 2, 3, 6, 8])}


def _bc_res_block(x, channels, stride, dilation, sub_bands, dropout, name):
  transition = x.shape[-1] != channels
  shortcut = x
  if transition:
    x = conv_bn_relu(x, channels, 1, name=f"{name}transition_")
  # f2: convolve along frequency only, channel by channel.
  x = layers.DepthwiseConv2D((1, 3), strides=(1, stride), padding="same", use_bias=False,
                             name=f"{name}freq_conv")(x)
  features_2d = _sub_spectral_norm(x, sub_bands, name=f"{name}ssn_")
  # Averaged over frequency, f1 sees one vector a frame: its convs cost 1/bands of 2D ones.
  x = layers.AveragePooling2D((1, features_2d.shape[2]), name=f"{name}freq_pool")(features_2d)
  x = layers.DepthwiseConv2D((3, 1), dilation_rate=(dilation, 1), padding="same", use_bias=False,
                             name=f"{name}time_conv")(x)
  x = batch_norm(f"{name}time_bn")(x)
  x = layers.Activation("swish", name=f"{name}swish")(x)
  x = layers.Conv2D(channels, 1, use_bias=False, name=f"{name}pointwise")(x)
  x = layers.SpatialDropout2D(dropout, name=f"{name}channel_dropout")(x)
  # Add broadcasts the [batch, frames, 1, channels] temporal residual over frequency.
  summands = [features_2d, x] if transition else [shortcut, features_2d, x]
  x = layers.Add(name=f"{name}add")(summands)
  return layers.ReLU(name=f"{name}relu")(x)


def _sub_spectral_norm(x, sub_bands, name):
  """SubSpectralNorm (Chang et al. 2021): BatchNorm statistics and affine per channel and sub-band.

  Keras 3's BatchNormalization normalizes one axis, so each sub-band is moved
  next to the channels and the two are merged into one axis of sub_bands x
  channels; at inference it is one scale and shift per (band, channel).
  """
  _, _, bands, channels = x.shape
  if sub_bands == 1:
    return batch_norm(f"{name}bn")(x)
  if bands % sub_bands:
    raise ValueError(f"bc_resnet's sub_bands={sub_bands} must divide every stage's frequency "
                     f"bands; a stage has {bands} (n_mels=40 gives 20, 10 and 5)")
  width = bands // sub_bands
  x = layers.Reshape((-1, sub_bands, width, channels), name=f"{name}split")(x)
  x = layers.Permute((1, 3, 2, 4), name=f"{name}bands_to_channels")(x)
  x = layers.Reshape((-1, width, sub_bands * channels), name=f"{name}merge")(x)
  x = batch_norm(f"{name}bn")(x)
  x = layers.Reshape((-1, width, sub_bands, channels), name=f"{name}unmerge")(x)
  x = layers.Permute((1, 3, 2, 4), name=f"{name}channels_to_bands")(x)
  return layers.Reshape((-1, bands, channels), name=f"{name}join")(x)


def _head(x, channels):
  # The paper's depthwise conv pads time only: it folds the last bands into
  # one before the widening 1x1 conv, which then costs a fifth.
  x = layers.ZeroPadding2D(((2, 2), (0, 0)), name="head_time_pad")(x)
  x = layers.DepthwiseConv2D((5, min(5, x.shape[2])), use_bias=False, name="head_conv")(x)
  x = conv_bn_relu(x, channels, 1, name="head_pointwise_")
  return layers.GlobalAveragePooling2D(name="pool")(x)
