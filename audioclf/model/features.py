"""The log-mel front end and SpecAugment masking as Keras layers, so every model takes raw audio."""

from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf import compat
from audioclf.compat import keras
from audioclf.params import Params


@keras.saving.register_keras_serializable(package="audioclf")
class LogMelSpectrogram(keras.layers.Layer):
  """float32 waveforms [batch, samples] -> log-mel energies [batch, frames, n_mels].

  Computing features inside the model means training, evaluation, the
  Estimator and every export run the very same code on raw audio: nothing
  outside the graph can drift.
  """

  def __init__(self, sample_rate: int, n_mels: int = 40, frame_ms: float = 30.0,
               stride_ms: float = 10.0, fmin: float = 20.0, fmax: float = 7600.0,
               log_offset: float = 1e-6, **kwargs):
    super().__init__(**kwargs)
    self.sample_rate = int(sample_rate)
    self.n_mels = int(n_mels)
    self.frame_ms = float(frame_ms)
    self.stride_ms = float(stride_ms)
    self.fmin = float(fmin)
    self.fmax = float(fmax)
    self.log_offset = float(log_offset)
    self.frame_length = int(round(self.sample_rate * self.frame_ms / 1000.0))
    self.frame_step = int(round(self.sample_rate * self.stride_ms / 1000.0))
    # The next power of two: the FFT is fastest there, and the extra bins only
    # sharpen the resolution the mel filters integrate over.
    self.fft_length = 2 ** math.ceil(math.log2(self.frame_length))
    # A preset written for 16 kHz keeps working on 8 kHz data: the top band
    # stops at Nyquist instead of asking for frequencies the signal cannot hold.
    self.upper_hz = min(self.fmax, self.sample_rate / 2.0)
    if not 0 <= self.fmin < self.upper_hz:
      raise ValueError(f"need 0 <= fmin < min(fmax, sample_rate / 2), got fmin={self.fmin}, "
                       f"fmax={self.fmax}, sample_rate={self.sample_rate}")
    if self.frame_step <= 0 or self.frame_length <= 0:
      raise ValueError(f"frame_ms and stride_ms must be at least one sample long at "
                       f"{self.sample_rate} Hz, got {self.frame_ms} and {self.stride_ms}")

  def build(self, input_shape):
    # A constant, not a weight: it is fixed by the config, and keeping it out of
    # checkpoints lets a model_dir restore into a rebuilt model with no surprises.
    self.mel_matrix = tf.constant(mel_matrix(self.n_mels, self.fft_length // 2 + 1,
                                             self.sample_rate, self.fmin, self.upper_hz))
    super().build(input_shape)

  def call(self, waveform):
    stft = tf.signal.stft(tf.cast(waveform, tf.float32), frame_length=self.frame_length,
                          frame_step=self.frame_step, fft_length=self.fft_length,
                          window_fn=tf.signal.hann_window)
    mel = self._project(tf.abs(stft))
    # The offset keeps silence finite (log 0 is -inf) while staying below any
    # energy a real recording has.
    return tf.math.log(mel + self.log_offset)

  def _project(self, magnitudes):
    """[..., bins] -> [..., n_mels]: the mel filters applied to STFT magnitudes."""
    return tf.tensordot(magnitudes, self.mel_matrix, axes=1)

  def num_frames(self, num_samples: int) -> int:
    return max(0, 1 + (num_samples - self.frame_length) // self.frame_step)

  def compute_output_shape(self, input_shape):
    *batch, samples = tf.TensorShape(input_shape).as_list()
    frames = None if samples is None else self.num_frames(samples)
    return (*batch, frames, self.n_mels)

  def get_config(self):
    config = super().get_config()
    config.update(sample_rate=self.sample_rate, n_mels=self.n_mels, frame_ms=self.frame_ms,
                  stride_ms=self.stride_ms, fmin=self.fmin, fmax=self.fmax,
                  log_offset=self.log_offset)
    return config

  @classmethod
  def from_params(cls, params: Params, **kwargs) -> "LogMelSpectrogram":
    return cls(sample_rate=params.sample_rate, n_mels=params.n_mels, frame_ms=params.frame_ms,
               stride_ms=params.stride_ms, fmin=params.fmin, fmax=params.fmax, **kwargs)


@functools.lru_cache(maxsize=16)
def mel_matrix(n_mels: int, bins: int, sample_rate: int, fmin: float, fmax: float) -> np.ndarray:
  """tf.signal.linear_to_mel_weight_matrix's filters, computed once (eagerly) per configuration.

  One constant in the graph: built in place, the matrix is 255 ops, which
  every graph that builds the model (each Estimator train and evaluation)
  would create, and Grappler fold again.
  """
  with tf.init_scope():
    matrix = tf.signal.linear_to_mel_weight_matrix(
        num_mel_bins=n_mels, num_spectrogram_bins=bins, sample_rate=sample_rate,
        lower_edge_hertz=fmin, upper_edge_hertz=fmax).numpy()
  matrix.flags.writeable = False  # Shared by every layer of this configuration.
  return matrix


def banded(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """A mel matrix [bins, bands] as each band's bins and weights [bands, width], padded with weight 0.

  A triangular filter covers a few adjacent FFT bins: gathering those and
  summing them is the matrix product without its zeros, and TFLite's
  dynamic-range quantization leaves a gather and a sum in float, where it
  would quantize a matrix product's input, a power spectrum 100 dB wide, to
  8 bits on the fly.
  """
  width = max(1, int((matrix != 0).sum(axis=0).max()))
  bins = np.zeros([matrix.shape[1], width], np.int32)
  weights = np.zeros([matrix.shape[1], width], np.float32)
  for band in range(matrix.shape[1]):
    nonzero = np.flatnonzero(matrix[:, band])
    bins[band, :len(nonzero)] = nonzero
    weights[band, :len(nonzero)] = matrix[nonzero, band]
  return bins, weights


def banded_product(power: tf.Tensor, bins: np.ndarray, weights: np.ndarray) -> tf.Tensor:
  """power [..., bins] times the mel matrix `banded` gave: [..., bands]."""
  return tf.reduce_sum(tf.gather(power, bins, axis=-1) * weights, axis=-1)


@keras.saving.register_keras_serializable(package="audioclf")
class SpecAugment(keras.layers.Layer):
  """Masks random frequency bands and time spans of [batch, frames, bins], in training only.

  After Park et al. 2019, "SpecAugment", without time warping (which buys
  little on one-second keywords). Masked cells take the example's mean, not
  zero: log-mel values sit far below zero, so a zero band would be a loud
  artificial stripe rather than an absence of information.
  """

  def __init__(self, freq_masks: int = 2, max_freq_bins: int = 8, time_masks: int = 2,
               max_time_frames: int = 10, **kwargs):
    super().__init__(**kwargs)
    self.freq_masks = int(freq_masks)
    self.max_freq_bins = int(max_freq_bins)
    self.time_masks = int(time_masks)
    self.max_time_frames = int(max_time_frames)

  def call(self, inputs, training: Optional[bool] = None):
    if not self.freq_masks and not self.time_masks:
      return inputs  # Switched off (--nospec_augment): no op in any graph.
    if training is None:
      # Graph-mode Keras 2 (the model that model_to_estimator clones) says it
      # through the learning phase; a plain Keras 3 call means inference.
      training = compat.learning_phase()
    if isinstance(training, (bool, int)):
      return self._mask(inputs) if training else inputs
    # A symbolic learning phase (graph-mode Keras) decides at run time.
    return tf.cond(tf.cast(training, tf.bool), lambda: self._mask(inputs),
                   lambda: tf.identity(inputs))

  def _mask(self, x):
    shape = tf.shape(x)
    batch, frames, bins = shape[0], shape[1], shape[2]
    keep = tf.ones_like(x, dtype=tf.bool)
    for _ in range(self.freq_masks):
      keep &= ~_random_band(batch, bins, self.max_freq_bins)[:, tf.newaxis, :]
    for _ in range(self.time_masks):
      keep &= ~_random_band(batch, frames, self.max_time_frames)[:, :, tf.newaxis]
    fill = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
    return tf.where(keep, x, tf.broadcast_to(fill, shape))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update(freq_masks=self.freq_masks, max_freq_bins=self.max_freq_bins,
                  time_masks=self.time_masks, max_time_frames=self.max_time_frames)
    return config


def _random_band(batch: tf.Tensor, size: tf.Tensor, max_width: int) -> tf.Tensor:
  """bool [batch, size]: one span per example, of width in [0, max_width], anywhere inside."""
  width = tf.minimum(tf.random.uniform([batch, 1], 0, max_width + 1, dtype=tf.int32), size)
  # Integer uniform wants scalar bounds; scaling a float draw gives each example its own.
  room = tf.cast(size - width + 1, tf.float32)
  start = tf.cast(tf.random.uniform([batch, 1]) * room, tf.int32)
  position = tf.range(size)[tf.newaxis, :]
  return (position >= start) & (position < start + width)
