"""Google's speech embedding as two Keras layers: log-mel frames from raw audio, embeddings from frames.

  waveform [batch, samples] float32 in [-1, 1], 16 kHz
    -> SpeechMel: 32 log-mel bins (60-3800 Hz), a frame every 10 ms (25 ms in a 512-point window)
    -> SpeechEmbedding: 96 dims every 8 frames (80 ms), each seeing 76 frames (775 ms)

Both hold the shipped weights (audioclf.model.speech.shipped) as Keras
weights, so checkpoints, SavedModel and TFLite carry them. The embedding
network is fully convolutional in time: run once over a clip's frames, its
outputs are those of the shipped model run on every 76-frame window 8 frames
apart, at a fraction of the work.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from audioclf.compat import keras
from audioclf.model.speech import shipped

SAMPLE_RATE = 16000
FRAME_SAMPLES = 512
HOP_SAMPLES = 160
MEL_BINS = 32
WINDOW_FRAMES = 76  # Frames one embedding sees.
EMBEDDING_HOP = 8  # Frames between embeddings: the network's pooling in time.
DIMS = 96
TOP_DB = 80.0
LEAKY_SLOPE = 0.2
FLOOR = -0.4  # Every hidden activation is clipped from below here.
# Which conv layers end in a 2x2 or 1x2 max pool (time x frequency), and the
# first layer of each of the five blocks the pools close: `trainable_blocks`
# counts these from the end.
POOLS = {2: (2, 2), 6: (1, 2), 10: (2, 2), 14: (1, 2), 18: (2, 2)}
BLOCK_STARTS = (0, 3, 7, 11, 15)


def num_frames(samples: int) -> int:
  """Mel frames of a clip of `samples` (no padding: only whole 512-sample windows)."""
  return max(0, 1 + (samples - FRAME_SAMPLES) // HOP_SAMPLES)


def num_embeddings(frames: int) -> int:
  """Embeddings of `frames` mel frames: one per whole 76-frame window, 8 frames apart."""
  return max(0, 1 + (frames - WINDOW_FRAMES) // EMBEDDING_HOP)


def mel_decibels(waveform, window, mel):
  """The mel energies in dB [batch, frames, 32] of float32 audio [batch, samples] in [-1, 1].

  The shipped model's 512-tap DFT products, by FFT, on samples at the int16 scale.
  `mel`: the filters [bins, 32], or a function of the power spectrum that applies them.
  """
  frames = tf.signal.frame(waveform * 32768.0, FRAME_SAMPLES, HOP_SAMPLES) * window
  power = tf.square(tf.abs(tf.signal.rfft(frames, [FRAME_SAMPLES])))
  energies = mel(power) if callable(mel) else tf.matmul(power, mel)
  return tf.math.log(tf.maximum(energies, 1e-10)) * (10.0 / np.log(10.0))


def scaled(decibels, peak):
  """mel_decibels floored TOP_DB under `peak`, scaled as the embedding network was fed."""
  return tf.maximum(decibels, peak - TOP_DB) / 10.0 + 2.0


def activation(x):
  """Every hidden layer's: a leaky ReLU, floored."""
  return tf.maximum(tf.nn.leaky_relu(x, alpha=LEAKY_SLOPE), FLOOR)


def _constant(value: np.ndarray):
  """An initializer that gives `value`: the shipped weights as a weight's initial value."""
  return lambda shape, dtype=None: tf.constant(value, dtype=dtype or tf.float32)


@keras.saving.register_keras_serializable(package="audioclf")
class SpeechMel(keras.layers.Layer):
  """float32 waveforms [batch, samples] at 16 kHz -> scaled log-mel frames [batch, frames, 32].

  The shipped mel model's arithmetic on samples at the int16 scale: a
  windowed DFT (by FFT), power, mel filters, 10 log10 floored 80 dB below the clip's
  peak, then (x / 10 + 2), the scaling the embedding network was fed.

  Args:
    padding: samples of silence added before and after each clip, so that
      windows starting before a word's onset or ending after its end see all
      of it (a 1 s clip alone holds three 775 ms windows).
  """

  def __init__(self, padding: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.padding = int(padding)

  def build(self, input_shape):
    # Constants, not weights, as LogMelSpectrogram's: nothing trains them, and a
    # checkpoint without them restores into any build of the same front end.
    weights = shipped.weights()
    self.window, self.mel = tf.constant(weights.window), tf.constant(weights.mel)
    super().build(input_shape)

  def call(self, waveform):
    waveform = tf.pad(tf.cast(waveform, tf.float32), [[0, 0], [self.padding, self.padding]])
    decibels = mel_decibels(waveform, self.window, self.mel)
    return scaled(decibels, tf.reduce_max(decibels, axis=[-2, -1], keepdims=True))

  def compute_output_shape(self, input_shape):
    *batch, samples = tf.TensorShape(input_shape).as_list()
    frames = None if samples is None else num_frames(samples + 2 * self.padding)
    return (*batch, frames, MEL_BINS)

  def get_config(self):
    config = super().get_config()
    config.update(padding=self.padding)
    return config


def layer_scope(i: int) -> str:
  """The name scope of the embedding network's layer i: an export can keep one layer in float."""
  return f"embedding{i}"


@keras.saving.register_keras_serializable(package="audioclf")
class SpeechEmbedding(keras.layers.Layer):
  """Scaled log-mel frames [batch, frames, 32] -> embeddings [batch, num_embeddings(frames), 96].

  Args:
    trainable_blocks: how many of the network's five blocks train, counted
      from the end (0 frozen, 5 all of it).
    lr_multiplier: the trainable blocks' step size relative to the rest of
      the model. Each weight is stored divided by it and used multiplied by
      it, so Adam's steps (of a size set by the learning rate whatever the
      gradient's scale) move the used weight by lr_multiplier times theirs.
  """

  def __init__(self, trainable_blocks: int = 0, lr_multiplier: float = 1.0, **kwargs):
    super().__init__(**kwargs)
    if not 0 <= trainable_blocks <= len(BLOCK_STARTS):
      raise ValueError(f"trainable_blocks must be 0 to {len(BLOCK_STARTS)}, "
                       f"not {trainable_blocks}")
    if lr_multiplier <= 0:
      raise ValueError(f"lr_multiplier must be positive, not {lr_multiplier}")
    self.trainable_blocks = int(trainable_blocks)
    self.lr_multiplier = float(lr_multiplier)

  def build(self, input_shape):
    weights = shipped.weights()
    blocks = self.trainable_blocks
    # The first conv layer that trains: frozen_part runs those before it, trained_part the rest.
    self.first_trained = first_trained = BLOCK_STARTS[-blocks] if blocks else shipped.CONV_LAYERS
    self.scale = scale = self.lr_multiplier if blocks else 1.0
    for i, (kernel, bias) in enumerate(zip(weights.kernels, weights.biases)):
      # An attribute each: Keras 3's TensorFlow checkpoints track a layer's
      # variables by attribute, and miss those held in a list.
      for part, value in (("kernel", kernel), ("bias", bias)):
        setattr(self, f"conv{i}_{part}",
                self.add_weight(name=f"conv{i}_{part}", shape=value.shape,
                                trainable=i >= first_trained, initializer=_constant(value / scale)))
    super().build(input_shape)

  @property
  def kernels(self) -> list:
    return [getattr(self, f"conv{i}_kernel") for i in range(shipped.CONV_LAYERS)]

  @property
  def biases(self) -> list:
    return [getattr(self, f"conv{i}_bias") for i in range(shipped.CONV_LAYERS)]

  def call(self, frames):
    return self.trained_part(self.frozen_part(frames))

  def frozen_part(self, frames):
    """The activations [batch, time, bins, channels] where the trained blocks begin (or the last conv's)."""
    with tf.name_scope(layer_scope(0)):  # What the first layer reads is named with it.
      x = tf.pad(tf.expand_dims(frames, -1), [[0, 0], [0, 0], [1, 1], [0, 0]])
    return self._convs(x, 0, self.first_trained)

  def trained_part(self, x):
    """frozen_part's activations -> embeddings [batch, embeddings, 96]: the trained blocks' work."""
    return tf.squeeze(self._convs(x, self.first_trained, shipped.CONV_LAYERS), axis=2)

  def _convs(self, x, start: int, stop: int):
    """Conv layers start .. stop - 1, each with its activation and pool (the last conv has none)."""
    for i in range(start, stop):
      with tf.name_scope(layer_scope(i)):
        x = self._layer(i, x)
    return x

  def _layer(self, i: int, x):
    kernel, bias = getattr(self, f"conv{i}_kernel"), getattr(self, f"conv{i}_bias")
    # A (1, 3) kernel keeps the frequency bins (padding them), a (3, 1) or
    # (3, 3) one reads whole frames only: no frame is ever padded in time.
    padding = "SAME" if kernel.shape[0] == 1 else "VALID"
    x = tf.nn.conv2d(x, kernel * self.scale, strides=1, padding=padding) + bias * self.scale
    if i == shipped.CONV_LAYERS - 1:
      return x
    x = activation(x)
    if i in POOLS:
      x = tf.nn.max_pool2d(x, POOLS[i], POOLS[i], padding="VALID")
    return x

  def compute_output_shape(self, input_shape):
    *batch, frames, _ = tf.TensorShape(input_shape).as_list()
    return (*batch, None if frames is None else num_embeddings(frames), DIMS)

  def get_config(self):
    config = super().get_config()
    config.update(trainable_blocks=self.trainable_blocks, lr_multiplier=self.lr_multiplier)
    return config
