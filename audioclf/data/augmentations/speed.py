"""Speed perturbation: each example resampled by a drawn factor, tempo and pitch together (Kaldi's).

The voice's one resampling: pitch_tempo's pitch shift moves by it too
(`Batch.resample_by`), so it runs wherever either is on, last of the voice
and the room, as speed perturbation of a recording (its room included).
Where it speeds an example up, its low-pass rides on the FFTs of the
vocoder or of the reverberation, whichever the example went through; only
examples with neither take a low-pass of their own (`Batch.band_limit`).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from audioclf.compat import xla as compat_xla
from audioclf.data.augmentations.base import Augmentation, Batch, between
from audioclf.data.augmentations.program import Step, apply, on_rows
from audioclf.data.augmentations.spectra import low_pass


class Speed(Augmentation):
  """--speed_perturb: a factor per example from min,max; the resampling pitch shifts use too."""
  name = "speed"
  fields = ("speed_perturb",)
  streams = ("speed",)

  def on(self, training: bool) -> bool:
    shifted = self.params.pitch_shift_semitones != (0.0, 0.0)  # Resampled by pitch_tempo's rate.
    return training and (self.params.speed_perturb != (1.0, 1.0) or shifted)

  def draw(self, batch: Batch) -> Optional[tf.Tensor]:
    """Each example's speed factor, its share of the resampling; None without --speed_perturb."""
    if self.params.speed_perturb == (1.0, 1.0):
      return None
    factors = between(self.params.speed_perturb, batch.uniform("speed")[0])
    batch.resample_by(factors)
    return factors

  def steps(self, batch: Batch, draws: Optional[tf.Tensor]) -> list[Step]:
    if batch.factors is None:
      return []
    return [resample_step(batch.factors, batch.band_limited)]


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

