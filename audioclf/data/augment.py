"""The waveform augmentations as in-graph TensorFlow ops on a batch, each a pure function of its draws.

Every function takes float32 waveforms [batch, samples] and per-example
values the sampler drew (`Sampler.augment` draws them from (seed, batch
number); nothing here draws), and returns a batch of the same shape. They
run once per batch, after the cache: no decoding, no Python per example.

  resample      speed perturbation (tempo and pitch together), band-limited
  stretch       tempo without pitch: a phase vocoder (tf.signal.rfft of Hann frames)
  reverberate   convolution with impulse responses, by FFT (their spectra: response_spectra)
  synthetic_rirs  impulse responses made of drawn noise and RT60s (recorded ones: audioclf.data.rir),
                  as many taps as synthetic_taps says
  noise_level   the gain of background noise (its excerpts: audioclf.data.noise)
  gain, mixup
  on_rows       a transformation of the chosen examples only
  apply         a batch's augmentations (each a Step: its op and its draws) as one program
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from audioclf.compat import xla as compat_xla

# 60 dB of decay is a factor 1000 in amplitude: exp(-ln(1000) t / RT60).
_LN_1000 = math.log(1000.0)


class Step(NamedTuple):
  """One augmentation of a batch, for `apply`: fn(waves, *tensors, **dict(static)) -> waves.

  `tensors` are its draws (and any tensor it reads, such as a bank of
  responses), `static` the Python values it is built for, as (name, value)
  pairs. With `labels`, fn(waves, labels, *tensors, **dict(static)) ->
  (waves, labels): mixup's soft labels.
  """
  fn: Callable
  tensors: tuple
  static: tuple = ()
  labels: bool = False


def apply(waves: tf.Tensor, labels: Optional[tf.Tensor], steps) -> tuple:
  """(waves, labels) after each of `steps` in turn: one XLA program on the current stack.

  One program for all the augmentations of a batch: from one step to the
  next XLA updates the batch in place, where a program per step costs a
  copy of the batch and a dispatch each. Steps of the same functions and
  static values share one compilation, whatever their draws; no steps: the
  batch as it is.
  """
  if not steps:
    return waves, labels
  return _apply(waves, labels, tuple((s.fn, s.static, s.labels) for s in steps),
                tuple(s.tensors for s in steps))


@compat_xla.compiled
def _apply(waves, labels, fns, tensors):
  for (fn, static, with_labels), values in zip(fns, tensors):
    if with_labels:
      waves, labels = fn(waves, labels, *values, **dict(static))
    else:
      waves = fn(waves, *values, **dict(static))
  return waves, labels


def _next_pow2(n: int) -> int:
  return 1 << max(0, (int(n) - 1).bit_length())


# Rows an augmentation of chosen examples transforms at once: its shapes stay
# static (one XLA compilation per size, whatever the number chosen), and few
# rows are transformed twice: chunks of _CHUNK, the last one of _TAIL when
# that covers what is left.
_CHUNK, _TAIL = 8, 4


def on_rows(fn, waves: tf.Tensor, chosen: tf.Tensor, *values: tf.Tensor) -> tf.Tensor:
  """`waves` with its `chosen` rows (bool [batch]) replaced by fn(those rows, *their `values`).

  Only the chosen examples cost their FFTs, and none chosen costs none.
  Under XLA, _CHUNK rows at a time, the last chunk (_TAIL rows where at most
  that many are left: 1.5 rows wasted on average, not 3.5) filled up with
  repeats of the last chosen row (the same bits, written twice); plain ops
  take them all at once. Each chunk reads its rows from the batch being
  updated, where no chunk before wrote them: each loop carries that one
  batch, which XLA updates in place, where reading `waves` too would cost a
  copy of it.
  """
  if not compat_xla.XLA:
    rows = tf.where(chosen)[:, 0]
    # None chosen: the batch as it is (RFFT refuses an empty batch it has to pad).
    return tf.cond(tf.size(rows) > 0, lambda: tf.tensor_scatter_nd_update(
        waves, rows[:, None], fn(tf.gather(waves, rows), *(tf.gather(v, rows) for v in values))),
                   lambda: waves)
  count = tf.reduce_sum(tf.cast(chosen, tf.int32))
  order = tf.argsort(tf.cast(tf.logical_not(chosen), tf.int32), stable=True)  # Chosen first.

  def chunks(size):
    def chunk(start, out):
      rows = tf.gather(order, tf.minimum(start + tf.range(size), count - 1))
      new = fn(tf.gather(out, rows), *(tf.gather(v, rows) for v in values))
      return start + size, tf.tensor_scatter_nd_update(out, rows[:, None], new)
    return chunk

  # Two loops, not a cond in one: a conditional would copy the batch at every chunk.
  start, out = tf.while_loop(lambda start, _: count - start > _TAIL, chunks(_CHUNK),
                             (tf.constant(0), waves))
  return tf.while_loop(lambda start, _: start < count, chunks(_TAIL), (start, out))[1]


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


def resample(waves: tf.Tensor, factors: tf.Tensor,
             band_limited: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Each example played `factors` times as fast ([batch] > 0), about the clip's centre.

  Output sample i reads the input at c + (i - c) * factor (c the centre),
  linearly interpolated (`_read_at`), zeros past either end; so tempo and
  pitch both move by the factor, as Kaldi's speed perturbation and
  kws_streaming's resampling do, and the clip keeps its length. Speeding up
  first removes what would fold over Nyquist (`low_pass`), as a real
  resampler does, but for the `band_limited` examples (bool [batch]), which
  have nothing there already (`stretch`'s cutoff).
  """
  return apply(waves, None, [resample_step(factors, band_limited)])[0]


def resample_step(factors: tf.Tensor, band_limited: Optional[tf.Tensor] = None) -> Step:
  """`resample` as a Step."""
  return Step(_resample, (tf.cast(factors, tf.float32), band_limited))


def _resample(waves, factors, band_limited):
  faster = factors > 1.0
  if band_limited is not None:
    faster &= tf.logical_not(band_limited)
  waves = on_rows(lambda rows, f: low_pass(rows, 1.0 / f), waves, faster, factors)
  return _read_at(waves, factors)


def _read_at(waves: tf.Tensor, factors: tf.Tensor) -> tf.Tensor:
  """Output sample i of each row read at c + (i - c) * factor, linearly interpolated, 0 outside.

  Outside means before sample 0 or past sample n - 1: a read between two
  samples of the clip interpolates them, any other is 0. Under XLA (the
  current stack), two gathers from the clip, which XLA makes one loop; as
  separate TensorFlow ops their dozen elementwise steps over batch x samples
  cost twice what CropAndResize does (bilinear, one box per row spanning
  the clip read: the same reads), which the legacy stack uses.
  """
  n = waves.shape[-1]
  if compat_xla.XLA:
    centre = (n - 1) / 2.0
    position = centre + (tf.range(n, dtype=tf.float32)[None, :] - centre) * factors[:, None]
    low = tf.clip_by_value(tf.cast(tf.floor(position), tf.int32), 0, n - 2)
    fraction = position - tf.cast(low, tf.float32)
    at = lambda i: tf.gather(waves, i, batch_dims=1)  # noqa: E731
    a, b = at(low), at(low + 1)
    return tf.where((position >= 0.0) & (position <= n - 1.0), a + fraction * (b - a), 0.0)
  # Output x reads input x1 (n - 1) + x (x2 - x1): x1 = (1 - factor) / 2, x2 - x1 = factor.
  first, zeros = (1.0 - factors) / 2.0, tf.zeros_like(factors)
  images = waves[:, tf.newaxis, :, tf.newaxis]  # [batch, height 1, width n, 1 channel].
  out = tf.image.crop_and_resize(images, tf.stack([zeros, first, zeros, first + factors], 1),
                                 tf.range(tf.shape(waves)[0]), [1, n], extrapolation_value=0.0)
  return tf.reshape(out, tf.shape(waves))


def vocoder_frame(sample_rate: int) -> int:
  """The phase vocoder's frame: a power of two near 32 ms (512 samples at 16 kHz)."""
  return _next_pow2(int(round(0.032 * sample_rate * 0.75)))


def stretch(waves: tf.Tensor, rates: tf.Tensor, frame_length: int,
            chosen: Optional[tf.Tensor] = None, cutoff: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Each example's tempo times `rates` ([batch] > 0), its pitch kept: a phase vocoder.

  The short-time spectrum (Hann frames, hop half a frame) is read at
  output frame t from input frame c + (t - c) * rate (c the middle frame):
  magnitudes interpolated between the two frames around it, phases advanced
  frame by frame by the input's own advance there (Flanagan and Golden 1966,
  as librosa's phase_vocoder), then resynthesised by overlap-add. The clip
  keeps its length: zeros where the stretched clip ends early. Rate 1 gives
  the clip back (to float rounding). Only the `chosen` examples (bool
  [batch]; all by default) are stretched: its cost is the STFT and its
  inverse of each (tools/bench_input.py --augment_each measures it). With
  `cutoff` ([batch], a fraction of Nyquist, as `low_pass`'s), the frequencies
  above it are left out of the output frames: the low-pass of a resampling
  that follows, without an FFT of its own.
  """
  batch = tf.shape(waves)[:1]
  chosen = tf.ones(batch, tf.bool) if chosen is None else chosen
  cutoff = tf.ones(batch) if cutoff is None else cutoff
  return apply(waves, None, [stretch_step(rates, frame_length, chosen, cutoff)])[0]


def stretch_step(rates: tf.Tensor, frame_length: int, chosen: tf.Tensor,
                 cutoff: tf.Tensor) -> Step:
  """`stretch` of the `chosen` examples as a Step."""
  return Step(_stretch_rows, (chosen, tf.cast(rates, tf.float32), tf.cast(cutoff, tf.float32)),
              (("frame_length", int(frame_length)),))


def _stretch_rows(waves, chosen, rates, cutoff, frame_length: int):
  return on_rows(lambda rows, r, c: _stretch(rows, r, c, frame_length), waves, chosen, rates,
                  cutoff)


def _stretch(waves: tf.Tensor, rates: tf.Tensor, cutoff: tf.Tensor,
             frame_length: int) -> tf.Tensor:
  # Time-major ([frame, row, ...]): the frames are cut by a reshape and the
  # phases run along axis 0, with no transposes of spectra in between.
  n, rows = waves.shape[-1], tf.shape(waves)[0]
  hop = frame_length // 2
  # A hop of zeros before the clip and enough after it: every sample of the
  # clip lies under two frames, the full overlap the inverse window assumes.
  frames = -(-(n + hop) // hop)
  padded = tf.pad(waves, [[0, 0], [hop, (frames + 1) * hop - n - hop]])
  halves = tf.transpose(tf.reshape(padded, [-1, frames + 1, hop]), [1, 0, 2])
  spectra = tf.signal.rfft(tf.concat([halves[:-1], halves[1:]], -1)
                           * tf.signal.hann_window(frame_length))  # [frames, rows, bins].
  centre = float(frames // 2)  # The middle frame: frame t is centred on the clip's sample t hop.
  position = centre + (tf.range(frames, dtype=tf.float32)[:, None] - centre) * rates[None, :]
  inside = tf.cast((position >= 0.0) & (position <= frames - 1.0), tf.float32)
  before = tf.clip_by_value(tf.cast(tf.floor(position), tf.int32), 0, frames - 2)
  fraction = tf.clip_by_value(position - tf.cast(before, tf.float32), 0.0, 1.0)[..., None]
  real, imag = tf.math.real(spectra), tf.math.imag(spectra)
  magnitude = tf.sqrt(real * real + imag * imag)
  at = _frames_at(before)
  low, high = at(magnitude), at(magnitude, 1)
  kept = inside[..., None] * passband(cutoff, frame_length)[None, :, :]
  out_magnitude = (low + fraction * (high - low)) * kept
  cos, sin = _output_phases(real, imag, magnitude, before, at)
  out = tf.signal.irfft(tf.complex(out_magnitude * cos, out_magnitude * sin), [frame_length])
  out *= tf.signal.inverse_stft_window_fn(hop)(frame_length, tf.float32)
  # Overlap-add: each frame's first half meets the previous frame's second
  # half (two pads and an add, where tf.signal.overlap_and_add takes a
  # general path that costs several times more).
  out = (tf.pad(out[:, :, :hop], [[0, 1], [0, 0], [0, 0]])
         + tf.pad(out[:, :, hop:], [[1, 0], [0, 0], [0, 0]]))
  out = tf.reshape(tf.transpose(out, [1, 0, 2]), [-1, (frames + 1) * hop])
  return out[:, hop:hop + n]


def _frames_at(before: tf.Tensor):
  """x [frames, rows, ...] -> x at frame before[t, r] + shift of row r, for each output frame t (< frames)."""
  rows = tf.broadcast_to(tf.range(tf.shape(before)[1])[None, :], tf.shape(before))
  indices = tf.stack([before, rows], -1)
  return lambda x, shift=0, frames=None: tf.gather_nd(
      x, (indices if frames is None else indices[:frames]) + [shift, 0])


def _output_phases(real, imag, magnitude, before, at) -> tuple[tf.Tensor, tf.Tensor]:
  """cos and sin of each output bin's phase: input frame before[0]'s, then each frame's advance.

  Output frame t + 1 advances on frame t by the input's advance from frame
  before[t] to before[t] + 1. Under XLA (the current stack), as a running
  product of unit phasors, frame by frame (`_running_products`): XLA's atan2,
  cos and sin are scalar calls, which made the whole stretch 4-5x slower.
  Elsewhere, as angles (atan2; a tenth of tf.math.angle's time on a complex
  tensor), summed by one matmul with a strictly lower triangle of ones (2-3x
  faster than tf.cumsum along the frame axis).
  """
  if compat_xla.XLA:
    # A bin of no energy has phase 0, as atan2(0, 0) says.
    inverse = 1.0 / tf.where(magnitude > 0.0, magnitude, 1.0)
    unit = tf.complex(tf.where(magnitude > 0.0, real * inverse, 1.0), imag * inverse)
    advance = at(unit[1:] * tf.math.conj(unit[:-1]))
    phasors = _running_products(at(unit, frames=1)[0], advance[:-1])
    return tf.math.real(phasors), tf.math.imag(phasors)
  phase = tf.math.atan2(imag, real)
  frames = phase.shape[0]
  earlier = tf.constant(np.tril(np.ones([frames, frames], np.float32), -1))
  steps = at(phase[1:] - phase[:-1])
  out_phase = at(phase, frames=1) + tf.reshape(
      tf.matmul(earlier, tf.reshape(steps, [frames, -1])), tf.shape(steps))
  return tf.cos(out_phase), tf.sin(out_phase)


def _running_products(first: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
  """[first, first steps[0], first steps[0] steps[1], ...] along axis 0: len(steps) + 1 frames.

  A loop that updates its output in place, frame t from frame t - 1: the
  same products as tf.scan's, whose accumulator is carried beside the
  output and copied each frame (~3% of the stretch's CPU).
  """
  out = tf.concat([first[None], tf.zeros_like(steps)], 0)

  def step(t, out):
    return t + 1, tf.tensor_scatter_nd_update(
        out, [[t]], (tf.gather(out, t - 1) * tf.gather(steps, t - 1))[None])

  return tf.while_loop(lambda t, _: t < out.shape[0], step, (tf.constant(1), out))[1]


def _rms(waves: tf.Tensor) -> tf.Tensor:
  return tf.sqrt(tf.reduce_mean(tf.square(waves), axis=-1, keepdims=True))


def _spectrum_rms(spectrum: tf.Tensor, n: int) -> tf.Tensor:
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
  best = 2 * _next_pow2(-(-n // 2))
  fives = 1
  while fives < best:
    threes = fives
    while threes < best:
      best = min(best, threes * 2 * _next_pow2(-(-n // (2 * threes))))
      threes *= 3
    fives *= 5
  return best


def response_spectra(rirs: tf.Tensor, n: int) -> tf.Tensor:
  """The spectra `reverberate` convolves clips of `n` samples with: of impulse responses [count, taps].

  Computed once for a bank of responses (the sampler's), not per batch: an
  FFT per response saved on every example reverberated.
  """
  return tf.signal.rfft(rirs, [fft_size(n + rirs.shape[-1] - 1)])


def reverberate(waves: tf.Tensor, spectra: tf.Tensor, which: Optional[tf.Tensor] = None,
                chosen: Optional[tf.Tensor] = None, cutoff: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Each example convolved with an impulse response: row `which` of `spectra` (`response_spectra`).

  Linear convolution by FFT (rfft, product, irfft over at least samples +
  taps - 1, so nothing wraps), cut to the clip and brought back to the
  clip's level: reverberation changes the sound, not how loud it is, and the
  noise mixed in next keeps its signal-to-noise ratio. `which` (int
  [batch]) defaults to row i for example i; only the `chosen` examples
  (bool [batch]; all by default) are convolved. With `cutoff` ([batch], a
  fraction of Nyquist, as `low_pass`'s), the frequencies above it are left
  out too: the low-pass of a resampling that follows, without an FFT of its own.
  """
  batch = tf.shape(waves)[:1]
  which = tf.range(batch[0]) if which is None else which
  chosen = tf.ones(batch, tf.bool) if chosen is None else chosen
  return apply(waves, None, [reverberate_step(spectra, which, chosen, cutoff)])[0]


def reverberate_step(spectra: tf.Tensor, which: tf.Tensor, chosen: tf.Tensor,
                     cutoff: Optional[tf.Tensor] = None) -> Step:
  """`reverberate` of the `chosen` examples as a Step."""
  cutoff = None if cutoff is None else tf.cast(cutoff, tf.float32)
  return Step(_reverberate_rows, (chosen, spectra, which, cutoff))


def _reverberate_rows(waves, chosen, spectra, which, cutoff):
  n, size = waves.shape[-1], 2 * (spectra.shape[-1] - 1)

  def convolve(rows, responses, *cut):
    dry = tf.signal.rfft(rows, [size])
    if cut:  # Without a cutoff (no resampling follows), no mask.
      dry *= tf.cast(passband(cut[0], size), tf.complex64)
    wet = tf.signal.irfft(dry * tf.gather(spectra, responses), [size])[:, :n]
    # The level of the dry clip as its low-pass leaves it: what the wet one is brought back to.
    return wet * (_spectrum_rms(dry, n) / tf.maximum(_rms(wet), 1e-9))

  return on_rows(convolve, waves, chosen, which, *(() if cutoff is None else (cutoff,)))


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


def synthetic_taps(rt60_seconds: float, sample_rate: int, most: int) -> int:
  """The taps of a synthetic response (at most `most`): until its tail's envelope is 60 dB below the direct path.

  The tail (`synthetic_rirs`) holds the direct path's energy spread over its
  decay, so it starts well below it (-30 dB for an RT60 of 0.8 s at 16 kHz)
  and falls 60 dB below the direct path about half an RT60 in (0.40 s of
  0.8): what follows would add less than a thousandth of the direct path's
  amplitude, and only lengthen every reverberation's FFTs (`response_spectra`).
  """
  taps = max(1, min(int(most), int(np.ceil(rt60_seconds * sample_rate))))
  envelope = np.exp(-_LN_1000 * np.arange(1, taps) / (rt60_seconds * sample_rate))
  level = envelope / max(float(np.sqrt(np.sum(envelope ** 2))), 1e-30)  # Unit-variance noise.
  below = np.flatnonzero(level <= 1e-3)  # below[0] is tap below[0] + 1.
  return int(below[0]) + 1 if len(below) else taps


def noise_level(waves: tf.Tensor, absolute: tf.Tensor, relative: tf.Tensor) -> tf.Tensor:
  """The gain of each example's noise ([batch]): absolute + relative x the example's RMS."""
  return absolute + relative * tf.sqrt(tf.reduce_mean(tf.square(waves), axis=-1) + 1e-12)


def noise_step(noise: tf.Tensor, chosen: tf.Tensor, absolute: tf.Tensor,
               relative: tf.Tensor) -> Step:
  """`noise` [batch, samples] under the `chosen` examples at `noise_level`, as a Step."""
  return Step(_noise_added, (noise, chosen, absolute, relative))


def _noise_added(waves, noise, chosen, absolute, relative):
  level = noise_level(waves, absolute, relative) * tf.cast(chosen, tf.float32)
  return waves + level[:, None] * noise


def scale_step(scale: float) -> Step:
  """int16 samples to float32 (times `scale`) as a Step: the program's first, fused into its first pass."""
  return Step(_scaled, (), (("scale", float(scale)),))


def _scaled(waves, scale: float):
  # Written out whole: fused into the passes that follow, the conversion
  # changed how XLA vectorized their sums (float rounding of 1 in 4% of a
  # noisy batch's samples), and the cold pass's float batches must give the same bits.
  return compat_xla.materialized(tf.cast(waves, tf.float32) * scale)


def gain(waves: tf.Tensor, db: tf.Tensor) -> tf.Tensor:
  """Each example scaled by its gain in dB ([batch])."""
  return waves * tf.pow(10.0, tf.cast(db, tf.float32) / 20.0)[:, None]


def gain_step(db: tf.Tensor) -> Step:
  """`gain` as a Step: inside the program, XLA folds it into the next pass over the batch."""
  return Step(gain, (db,))


def mixup(waves: tf.Tensor, labels: tf.Tensor, partners: tf.Tensor, weights: tf.Tensor):
  """Each example and its (soft) label mixed with those of `partners`, in proportion `weights`.

  Zhang et al. 2018: x = w x_i + (1 - w) x_j and y = w y_i + (1 - w) y_j,
  with `partners` [batch] (j for each i) and `weights` [batch] in [0, 1].
  Under XLA, one pass over the batch (the partners' rows are not copied first).
  """
  return apply(waves, labels, [Step(_mix, (partners, weights), labels=True)])


def mixup_step(partners: tf.Tensor, weights: tf.Tensor, classes: int) -> Step:
  """`mixup` of examples whose labels are class ids (of `classes`) as a Step: soft labels out."""
  return Step(_mix_classes, (partners, weights), (("classes", int(classes)),), labels=True)


def _mix_classes(waves, labels, partners, weights, classes: int):
  return _mix(waves, tf.one_hot(labels, classes), partners, weights)


def _mix(waves, labels, partners, weights):
  weights = tf.cast(weights, tf.float32)[:, None]
  waves = compat_xla.materialized(waves)  # Not recomputed by the gather of partners.
  mix = lambda x: weights * x + (1.0 - weights) * tf.gather(x, partners)  # noqa: E731
  return mix(waves), mix(labels)
