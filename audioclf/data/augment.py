"""The waveform augmentations as in-graph TensorFlow ops on a batch, each a pure function of its draws.

Every function takes float32 waveforms [batch, samples] and per-example
values the sampler drew (`Sampler.augment` draws them from (seed, batch
number); nothing here draws), and returns a batch of the same shape. They
run once per batch, after the cache: no decoding, no Python per example.

  resample      speed perturbation (tempo and pitch together), band-limited
  stretch       tempo without pitch: a phase vocoder on tf.signal.stft
  reverberate   convolution with impulse responses, by FFT
  synthetic_rirs  impulse responses made of drawn noise and RT60s (recorded ones: audioclf.data.rir)
  gain, mixup
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from audioclf.compat import stack as compat_stack

# 60 dB of decay is a factor 1000 in amplitude: exp(-ln(1000) t / RT60).
_LN_1000 = math.log(1000.0)


def _next_pow2(n: int) -> int:
  return 1 << max(0, (int(n) - 1).bit_length())


def low_pass(waves: tf.Tensor, cutoff: tf.Tensor) -> tf.Tensor:
  """Each example with the frequencies above `cutoff` (a fraction of Nyquist, [batch]) removed.

  A mask on the FFT of the clip, zero-padded to a power of two: circular, so
  a little of a clip's end can ring into its start, which a 1 s keyword clip
  (quiet at both ends) never shows.
  """
  n = waves.shape[-1]
  size = _next_pow2(n)
  spectrum = tf.signal.rfft(waves, [size])
  bins = tf.range(size // 2 + 1, dtype=tf.float32) / (size // 2)
  keep = tf.cast(bins[None, :] <= cutoff[:, None], tf.complex64)
  return tf.signal.irfft(spectrum * keep, [size])[:, :n]


def resample(waves: tf.Tensor, factors: tf.Tensor) -> tf.Tensor:
  """Each example played `factors` times as fast ([batch] > 0), about the clip's centre.

  Output sample i reads the input at c + (i - c) * factor (c the centre),
  linearly interpolated (`_read_at`), zeros past either end; so tempo and
  pitch both move by the factor, as Kaldi's speed perturbation and
  kws_streaming's resampling do, and the clip keeps its length. Speeding up first removes what would
  fold over Nyquist (`low_pass`), as a real resampler does.
  """
  factors = tf.cast(factors, tf.float32)
  faster = tf.where(factors > 1.0)[:, 0]
  waves = tf.cond(tf.size(faster) > 0, lambda: tf.tensor_scatter_nd_update(
      waves, faster[:, None], low_pass(tf.gather(waves, faster), 1.0 / tf.gather(factors, faster))),
                  lambda: waves)
  return _read_at(waves, factors)


def _read_at(waves: tf.Tensor, factors: tf.Tensor) -> tf.Tensor:
  """Output sample i of each row read at c + (i - c) * factor, linearly interpolated, 0 outside.

  On the current stack, one loop over the batch compiled by XLA (eagerly and
  inside tf.data alike): as separate TensorFlow ops, the dozen elementwise
  steps over batch x samples cost several times more. The legacy stack's XLA
  prints its compiler's notes on stderr at every first use, whatever
  TF_CPP_MIN_LOG_LEVEL says; there the same reads are
  ImageProjectiveTransformV3's (the kernel behind Keras' RandomZoom).
  """
  if compat_stack.STACK == compat_stack.CURRENT_STACK:
    return _read_at_xla(waves, factors)
  n = waves.shape[-1]
  centre = (n - 1) / 2.0
  zeros, ones = tf.zeros_like(factors), tf.ones_like(factors)
  # Output (x, y) reads input ((a0 x + a1 y + a2), (b0 x + b1 y + b2)): a0 = factor.
  transforms = tf.stack([factors, zeros, centre * (1.0 - factors), zeros, ones, zeros, zeros,
                         zeros], axis=1)
  images = waves[:, tf.newaxis, :, tf.newaxis]  # [batch, height 1, width n, 1 channel].
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=images, transforms=transforms, output_shape=tf.constant([1, n], tf.int32),
      fill_value=0.0, interpolation="BILINEAR", fill_mode="CONSTANT")
  return tf.reshape(out, tf.shape(waves))


@tf.function(jit_compile=True)
def _read_at_xla(waves: tf.Tensor, factors: tf.Tensor) -> tf.Tensor:
  """`_read_at` as a gather from the clip with a zero each side, for XLA to fuse."""
  n = waves.shape[-1]
  centre = (n - 1) / 2.0
  position = centre + (tf.range(n, dtype=tf.float32)[None, :] - centre) * factors[:, None]
  before = tf.floor(position)
  fraction = position - before
  # One zero each side: a read from -1 < x < 0 or n - 1 < x < n fades to 0, as at any edge.
  padded = tf.pad(waves, [[0, 0], [1, 1]])
  low = tf.cast(before, tf.int32) + 1  # Its index in padded.
  a = tf.gather(padded, tf.clip_by_value(low, 0, n + 1), batch_dims=1)
  b = tf.gather(padded, tf.clip_by_value(low + 1, 0, n + 1), batch_dims=1)
  return a + fraction * (b - a)


def vocoder_frame(sample_rate: int) -> int:
  """The phase vocoder's frame: a power of two near 32 ms (512 samples at 16 kHz)."""
  return _next_pow2(int(round(0.032 * sample_rate * 0.75)))


def stretch(waves: tf.Tensor, rates: tf.Tensor, frame_length: int) -> tf.Tensor:
  """Each example's tempo times `rates` ([batch] > 0), its pitch kept: a phase vocoder.

  The short-time spectrum (Hann frames, hop half a frame) is read at
  output frame t from input frame c + (t - c) * rate (c the centre frame):
  magnitudes interpolated between the two frames around it, phases advanced
  frame by frame by the input's own advance there (Flanagan and Golden 1966,
  as librosa's phase_vocoder), then resynthesised by overlap-add. The clip
  keeps its length: zeros where the stretched clip ends early. Rate 1 gives
  the clip back (to float rounding). Its cost is the STFT and its inverse
  (tools/bench_input.py --augment_each measures it).
  """
  n = waves.shape[-1]
  hop = frame_length // 2
  # Zeros around the clip: its first and last samples get the full overlap of windows.
  padded = tf.pad(waves, [[0, 0], [frame_length, frame_length]])
  spectra = tf.signal.stft(padded, frame_length, hop, pad_end=True)
  frames = spectra.shape[1]
  rates = tf.cast(rates, tf.float32)[:, None]
  centre = (frames - 1) / 2.0
  position = centre + (tf.range(frames, dtype=tf.float32)[None, :] - centre) * rates
  inside = tf.cast((position >= 0.0) & (position <= frames - 1.0), tf.float32)
  before = tf.clip_by_value(tf.cast(tf.floor(position), tf.int32), 0, frames - 2)
  fraction = tf.clip_by_value(position - tf.cast(before, tf.float32), 0.0, 1.0)[..., None]
  real, imag = tf.math.real(spectra), tf.math.imag(spectra)
  magnitude = tf.sqrt(real * real + imag * imag)
  phase = tf.math.atan2(imag, real)  # A tenth of tf.math.angle's time on a complex tensor.
  low = tf.gather(magnitude, before, axis=1, batch_dims=1)
  high = tf.gather(magnitude, before + 1, axis=1, batch_dims=1)
  out_magnitude = (low + fraction * (high - low)) * inside[..., None]
  advance = tf.gather(phase[:, 1:] - phase[:, :-1], before, axis=1, batch_dims=1)
  # The running sum of the advances over frames as one matmul with a strictly
  # lower triangle of ones: 2-3x faster than tf.cumsum along the frame axis.
  earlier = tf.constant(np.tril(np.ones([1, frames, frames], np.float32), -1))
  out_phase = (tf.gather(phase, before[:, :1], axis=1, batch_dims=1)
               + tf.matmul(earlier, advance))
  out = _overlap_add_halves(tf.signal.irfft(
      tf.complex(out_magnitude * tf.cos(out_phase), out_magnitude * tf.sin(out_phase)),
      [frame_length]) * tf.signal.inverse_stft_window_fn(hop)(frame_length, tf.float32))
  return out[:, frame_length:frame_length + n]


def _overlap_add_halves(frames: tf.Tensor) -> tf.Tensor:
  """Frames [batch, t, 2 hop] overlapped by half and added: [batch, (t + 1) hop].

  Each frame's first half meets the previous frame's second half: two pads,
  an add and a reshape, where tf.signal.overlap_and_add (inverse_stft's
  last step) takes a general path that costs several times more.
  """
  t, hop = frames.shape[1], frames.shape[2] // 2
  out = (tf.pad(frames[:, :, :hop], [[0, 0], [0, 1], [0, 0]])
         + tf.pad(frames[:, :, hop:], [[0, 0], [1, 0], [0, 0]]))
  return tf.reshape(out, [-1, (t + 1) * hop])


def _rms(waves: tf.Tensor) -> tf.Tensor:
  return tf.sqrt(tf.reduce_mean(tf.square(waves), axis=-1, keepdims=True))


def fft_size(n: int) -> int:
  """The smallest length >= n with no prime factor above 5, which FFTs handle fastest."""
  best = _next_pow2(n)
  fives = 1
  while fives < best:
    threes = fives
    while threes < best:
      best = min(best, threes * _next_pow2(-(-n // threes)))
      threes *= 3
    fives *= 5
  return best


def reverberate(waves: tf.Tensor, rirs: tf.Tensor) -> tf.Tensor:
  """Each example convolved with its impulse response ([batch, taps], direct path first).

  Linear convolution by FFT (rfft, product, irfft over at least samples +
  taps - 1, so nothing wraps), cut to the clip and brought back to the
  clip's level: reverberation changes the sound, not how loud it is, and the
  noise mixed in next keeps its signal-to-noise ratio.
  """
  n, taps = waves.shape[-1], rirs.shape[-1]
  size = fft_size(n + taps - 1)
  wet = tf.signal.irfft(tf.signal.rfft(waves, [size]) * tf.signal.rfft(rirs, [size]),
                        [size])[:, :n]
  return wet * (_rms(waves) / tf.maximum(_rms(wet), 1e-9))


def synthetic_rirs(noise: tf.Tensor, rt60_seconds: tf.Tensor, sample_rate: int) -> tf.Tensor:
  """Impulse responses [batch, taps] from white `noise` [batch, taps] and RT60s [batch].

  A direct path (1 at tap 0) and a diffuse tail: the noise under an
  exponential envelope that falls 60 dB in rt60 seconds, scaled to the
  direct path's energy (a direct-to-reverberant ratio of 0 dB: a talker a
  metre or two away in a room).
  """
  taps = noise.shape[-1]
  t = tf.range(taps, dtype=tf.float32)[None, :] / sample_rate
  envelope = tf.exp(-_LN_1000 * t / tf.cast(rt60_seconds, tf.float32)[:, None])
  tail = noise * envelope * tf.cast(t > 0, tf.float32)
  tail /= tf.maximum(tf.norm(tail, axis=-1, keepdims=True), 1e-9)
  return tail + tf.one_hot(tf.zeros(tf.shape(noise)[:1], tf.int32), taps)


def gain(waves: tf.Tensor, db: tf.Tensor) -> tf.Tensor:
  """Each example scaled by its gain in dB ([batch])."""
  return waves * tf.pow(10.0, tf.cast(db, tf.float32) / 20.0)[:, None]


def mixup(waves: tf.Tensor, labels: tf.Tensor, partners: tf.Tensor, weights: tf.Tensor):
  """Each example and its (soft) label mixed with those of `partners`, in proportion `weights`.

  Zhang et al. 2018: x = w x_i + (1 - w) x_j and y = w y_i + (1 - w) y_j,
  with `partners` [batch] (j for each i) and `weights` [batch] in [0, 1].
  """
  weights = tf.cast(weights, tf.float32)[:, None]
  mix = lambda x: weights * x + (1.0 - weights) * tf.gather(x, partners)  # noqa: E731
  return mix(waves), mix(labels)
