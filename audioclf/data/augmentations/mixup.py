"""Mixup (Zhang et al. 2018): each example mixed with a partner of its batch, and its label with it.

The last augmentation: it mixes finished examples and their labels (soft
labels, one value per class). Each example's partner is a drawn
permutation of the batch, its weight Beta(a, a).
"""

from __future__ import annotations

import tensorflow as tf

from audioclf.compat import xla as compat_xla
from audioclf.data.augmentations.base import Augmentation, Batch, Sources
from audioclf.data.augmentations.program import Step, apply
from audioclf.params import Params


class Mixup(Augmentation):
  """--mixup_alpha: the Beta(alpha, alpha) of each example's weight; 0 is off.

  Raises:
    ValueError: mixup without num_classes.
  """
  name = "mixup"
  fields = ("mixup_alpha",)
  streams = ("mixup", "mixup/a", "mixup/b")

  def __init__(self, params: Params, sources: Sources):
    super().__init__(params, sources)
    if params.mixup_alpha and not sources.num_classes:
      raise ValueError("mixup needs num_classes: its labels are soft, one value per class")

  def on(self, training: bool) -> bool:
    return training and self.params.mixup_alpha > 0

  def draw(self, batch: Batch) -> tuple[tf.Tensor, tf.Tensor]:
    """(each example's partner, its weight)."""
    partners = tf.argsort(batch.uniform("mixup")[0])
    # Beta(a, a) as the ratio of two Gamma(a) draws: one op each, keyed like every draw.
    a, b = (tf.random.stateless_gamma(batch.size, batch.key(name), alpha=self.params.mixup_alpha)
            for name in ("mixup/a", "mixup/b"))
    return partners, tf.math.divide_no_nan(a, a + b)

  def steps(self, batch: Batch, draws: tuple[tf.Tensor, tf.Tensor]) -> list[Step]:
    return [mixup_step(*draws, self.sources.num_classes)]


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
