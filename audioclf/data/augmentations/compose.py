"""Augmenter: the augmentations of one stream over a split, drawn per batch and run in ORDER as one program."""

from __future__ import annotations

import copy
from typing import Optional

import tensorflow as tf

from audioclf.data.augmentations import registered
from audioclf.data.augmentations.base import Augmentation, Batch, Sources
from audioclf.data.augmentations.program import Step, apply, scale_step
from audioclf.data.streams import Streams
from audioclf.params import Params


class Augmenter:
  """Batch k's augmentations, each a pure function of the batch's keys (`streams`).

  Training gets every augmentation that is on, in ORDER; evaluation only the
  noise of _silence_ clips. Every draw is taken first; the augmentations
  then run as one program (`program.apply`).

  Raises:
    ValueError: an augmentation that cannot run as asked (mixup without num_classes).
  """

  def __init__(self, params: Params, streams: Streams, sources: Sources):
    self.streams = streams
    self.augmentations: tuple[Augmentation, ...] = tuple(
        cls(params, sources) for cls in registered())

  def on(self, training: bool) -> list[Augmentation]:
    """The augmentations that change batches of this stream, in ORDER."""
    return [a for a in self.augmentations if a.on(training)]

  def mapped(self) -> "Augmenter":
    """These augmentations for a graph that runs on another host (`Sampler.mapped`)."""
    out = copy.copy(self)
    out.augmentations = tuple(a.mapped() for a in self.augmentations)
    return out

  def augment(self, waves: tf.Tensor, labels: tf.Tensor, k, training: bool = True,
              scale: Optional[float] = None) -> tuple:
    """Batch k's augmentations ([batch, clip_samples] float32; labels [batch]): (waves, labels).

    An augmentation that is off adds no op to the graph. With `scale`,
    `waves` are int16 samples that the program first turns into float32
    (times scale).
    """
    steps = [] if scale is None else [scale_step(scale)]
    return apply(waves, labels, steps + self.steps(waves, labels, k, training))

  def steps(self, waves: tf.Tensor, labels: tf.Tensor, k, training: bool = True) -> list[Step]:
    """Batch k's augmentations as program.Steps, every draw taken, in ORDER."""
    batch = Batch(waves, labels, k, training, self.streams)
    drawn = []
    for augmentation in self.on(training):
      batch.drawing = augmentation.streams
      drawn.append((augmentation, augmentation.draw(batch)))
    steps = []
    for augmentation, draws in drawn:
      batch.drawing = augmentation.streams
      steps += augmentation.steps(batch, draws)
    return steps
