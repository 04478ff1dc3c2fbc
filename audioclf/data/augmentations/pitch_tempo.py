"""Pitch and tempo apart: a phase vocoder stretches the tempo, the voice's resampling moves the pitch.

One stretch and one resampling: stretched by tempo / pitch (the tempo
moves, the pitch stays), then resampled by speed x pitch (speed.py), an
example's tempo moves by speed x tempo and its pitch by speed x pitch. Only
the examples chosen for the vocoder (pitch_tempo_prob) go through it; the
others take pitch and tempo 1.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.compat import xla as compat_xla
from audioclf.data.augmentations.base import Augmentation, Batch, between
from audioclf.data.augmentations.program import Step, apply, on_rows
from audioclf.data.augmentations.spectra import next_pow2, passband


class PitchTempo(Augmentation):
  """--pitch_shift_semitones and --tempo_perturb, for the pitch_tempo_prob share of examples."""
  name = "pitch_tempo"
  fields = ("pitch_shift_semitones", "tempo_perturb", "pitch_tempo_prob")
  streams = ("pitch", "tempo", "vocoder")

  def on(self, training: bool) -> bool:
    p = self.params
    return training and (p.pitch_shift_semitones != (0.0, 0.0) or p.tempo_perturb != (1.0, 1.0))

  def draw(self, batch: Batch) -> tuple[tf.Tensor, tf.Tensor]:
    """(the examples chosen, their stretch rates); their pitch joins the resampling."""
    semitones, tempo, pick = (batch.uniform(name)[0] for name in self.streams)
    chosen = pick < self.params.pitch_tempo_prob
    pitch = tf.where(chosen, 2.0 ** (between(self.params.pitch_shift_semitones, semitones) / 12.0),
                     1.0)
    if self.params.pitch_shift_semitones != (0.0, 0.0):
      batch.resample_by(pitch)
    return chosen, between(self.params.tempo_perturb, tempo) / pitch

  def steps(self, batch: Batch, draws: tuple[tf.Tensor, tf.Tensor]) -> list[Step]:
    chosen, rates = draws
    cutoff = tf.ones(batch.size)
    if batch.factors is not None:
      # The resampling's low-pass of these examples is the vocoder's, on its own spectra.
      cutoff = 1.0 / batch.factors
      batch.band_limit(chosen)
    return [stretch_step(rates, vocoder_frame(self.params.sample_rate), chosen, cutoff)]


def vocoder_frame(sample_rate: int) -> int:
  """The phase vocoder's frame: a power of two near 32 ms (512 samples at 16 kHz)."""
  return next_pow2(int(round(0.032 * sample_rate * 0.75)))


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

