"""What the augmentations' FFTs share: fast sizes, passbands, the low-pass, the level of a clip."""

from __future__ import annotations

import tensorflow as tf


def next_pow2(n: int) -> int:
  """The smallest power of two >= n."""
  return 1 << max(0, (int(n) - 1).bit_length())


def low_pass(waves: tf.Tensor, cutoff: tf.Tensor) -> tf.Tensor:
  """Each example with the frequencies above `cutoff` (a fraction of Nyquist, [batch]) removed.

  A mask on the FFT of the clip, zero-padded to the next length FFTs handle
  fastest (`fft_size`; 16000 itself for 1 s at 16 kHz, a fifth faster than
  16384): circular, so a little of a clip's end can ring into its start,
  which a 1 s keyword clip (quiet at both ends) never shows.
  """
  n = waves.shape[-1]
  size = fft_size(n)
  spectrum = tf.signal.rfft(waves, [size])
  return tf.signal.irfft(spectrum * tf.cast(passband(cutoff, size), tf.complex64), [size])[:, :n]


def passband(cutoff: tf.Tensor, size: int) -> tf.Tensor:
  """float32 [rows, size // 2 + 1]: 1 for the bins of a `size`-point rfft at or below each row's `cutoff`, else 0.

  `cutoff` ([rows]) is a fraction of Nyquist: 1 or more keeps every bin.
  """
  bins = tf.range(size // 2 + 1, dtype=tf.float32) / (size // 2)
  return tf.cast(bins[None, :] <= cutoff[:, None], tf.float32)


def rms(waves: tf.Tensor) -> tf.Tensor:
  """The RMS of each row ([rows, 1])."""
  return tf.sqrt(tf.reduce_mean(tf.square(waves), axis=-1, keepdims=True))


def spectrum_rms(spectrum: tf.Tensor, n: int) -> tf.Tensor:
  """The RMS over `n` samples ([rows, 1]) of the signals whose rfft (of even length) is `spectrum`.

  Parseval: a bin between 0 and Nyquist stands for itself and its mirror image.
  """
  power = tf.square(tf.math.real(spectrum)) + tf.square(tf.math.imag(spectrum))
  bins = spectrum.shape[-1]
  twice = tf.concat([[1.0], tf.fill([bins - 2], 2.0), [1.0]], 0)
  size = 2 * (bins - 1)
  return tf.sqrt(tf.reduce_sum(power * twice, -1, keepdims=True) / (size * n))


def fft_size(n: int) -> int:
  """The smallest even length >= n with no prime factor above 5, which FFTs handle fastest.

  Even, so a spectrum's length says the transform's (`reverberate`).
  """
  best = 2 * next_pow2(-(-n // 2))
  fives = 1
  while fives < best:
    threes = fives
    while threes < best:
      best = min(best, threes * 2 * next_pow2(-(-n // (2 * threes))))
      threes *= 3
    fives *= 5
  return best
