"""Gain: each example scaled by a gain in dB drawn from --gain_db, after the noise so its SNR holds."""

from __future__ import annotations

import tensorflow as tf

from audioclf.data.augmentations.base import Augmentation, Batch, between
from audioclf.data.augmentations.program import Step


class Gain(Augmentation):
  """--gain_db: a gain per example from min,max."""
  name = "gain"
  fields = ("gain_db",)
  streams = ("gain",)

  def on(self, training: bool) -> bool:
    return training and self.params.gain_db != (0.0, 0.0)

  def draw(self, batch: Batch) -> tf.Tensor:
    """Each example's gain in dB."""
    return between(self.params.gain_db, batch.uniform("gain")[0])

  def steps(self, batch: Batch, draws: tf.Tensor) -> list[Step]:
    return [gain_step(draws)]


def gain(waves: tf.Tensor, db: tf.Tensor) -> tf.Tensor:
  """Each example scaled by its gain in dB ([batch])."""
  return waves * tf.pow(10.0, tf.cast(db, tf.float32) / 20.0)[:, None]


def gain_step(db: tf.Tensor) -> Step:
  """`gain` as a Step: inside the program, XLA folds it into the next pass over the batch."""
  return Step(gain, (db,))

