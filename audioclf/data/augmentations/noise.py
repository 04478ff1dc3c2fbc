"""Background noise: an excerpt of a recording (or white noise) under an example, at a drawn level.

Training: each example, with chance noise_prob, gets an excerpt of a
background recording (or white noise) at a signal-to-noise ratio drawn
uniformly from noise_snr_db, against the recording's level; a _silence_
clip always gets one, at a gain drawn from [0, 1) of the recording's own
level (as Speech Commands' recipe does). Evaluation: only the _silence_
clips, from streams of their own, so every evaluation of a split sees the
same silence clips. The excerpts themselves are noise.Recordings'.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from audioclf.data.augmentations.base import Augmentation, Batch
from audioclf.data.augmentations.program import Step

# White noise where there are no background recordings: its level only
# matters for _silence_ clips, whose gain is absolute (-20 dBFS at most).
WHITE_RMS = 0.1


class Noise(Augmentation):
  """--noise_prob of training examples, and every _silence_ clip, mixed with background noise."""
  name = "noise"
  fields = ("noise_prob", "noise_snr_db", "noise_dir")
  streams = ("noise", "noise/white", "silence", "silence/white")

  def on(self, training: bool) -> bool:
    return (training and self.params.noise_prob > 0) or self.sources.silence_label is not None

  def mapped(self) -> "Noise":
    """Its recordings mapped from the cache where the graph runs (`noise.Recordings.mapped`)."""
    recordings = self.sources.recordings
    if recordings is None:
      return self
    return Noise(self.params, dataclasses.replace(self.sources, recordings=recordings.mapped()))

  def draw(self, batch: Batch) -> tuple:
    """(pick, level, which, where, gain: float64 [batch] each; white noise or None)."""
    stream = "noise" if batch.training else "silence"  # Evaluation draws apart from training's.
    uniform = tf.unstack(tf.random.stateless_uniform(
        tf.concat([[5], batch.size], 0), batch.key(stream), dtype=tf.float64))
    white = None
    if self.sources.recordings is None:
      white = WHITE_RMS * tf.random.stateless_normal(tf.shape(batch.waves),
                                                     batch.key(stream + "/white"))
    return (*uniform, white)

  def steps(self, batch: Batch, draws: tuple) -> list[Step]:
    pick, level, which, where, gain, white = draws
    silence_label, recordings = self.sources.silence_label, self.sources.recordings
    silence = (tf.equal(batch.labels, silence_label) if silence_label is not None
               else tf.zeros(batch.size, tf.bool))
    chosen = (silence | (pick < self.params.noise_prob)) if batch.training else silence
    low, high = self.params.noise_snr_db
    snr_db = tf.cast(low + level * (high - low), tf.float32)
    # The level of the recording, not of the excerpt: a quiet passage stays quiet.
    noise_rms = WHITE_RMS if recordings is None else recordings.rms(which)
    # A _silence_ clip's noise at its gain; any other's at its SNR against the example's RMS.
    absolute = tf.where(silence, tf.cast(gain, tf.float32), 0.0)
    relative = tf.where(silence, 0.0, 1.0 / (noise_rms * 10.0 ** (snr_db / 20.0)))
    if recordings is not None:
      return [recordings.add_step(chosen, which, where, absolute, relative,
                                  batch.waves.shape[-1])]
    return [noise_step(white, chosen, absolute, relative)]


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
