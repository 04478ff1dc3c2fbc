"""The loss and accuracy compile_model uses: sparse or soft labels, label smoothing, class weights.

Evaluation always feeds class ids [batch]; training feeds class ids too, or
soft labels [batch, classes] with mixup. One compiled model serves both (and
the Estimator's clone of it, through model_to_estimator), so the loss and
the accuracy here take either. Without label smoothing, class weights or
mixup, compile_model keeps Keras' own sparse loss and accuracy: today's
runs compute exactly what they did.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from audioclf.compat import keras
from audioclf.params import Params


def balanced_weights(counts: Sequence[int]) -> list[float]:
  """scikit-learn's "balanced" class weights, n / (classes x count), of the classes present.

  A class with no example gets weight 1: it is never trained on, and its
  evaluation loss is left as it is.
  """
  counts = np.asarray(counts, np.float64)
  present = counts > 0
  weights = np.ones_like(counts)
  weights[present] = counts.sum() / (present.sum() * counts[present])
  return weights.tolist()


def _as_distribution(y_true: tf.Tensor, num_classes: int) -> tf.Tensor:
  """Labels as one row per example over the classes: soft labels as they are, ids one-hot."""
  if y_true.shape.rank == 2 and y_true.shape[-1] == num_classes and num_classes > 1:
    return tf.cast(y_true, tf.float32)
  return tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), num_classes)


@keras.saving.register_keras_serializable(package="audioclf")
class ClassifierLoss(keras.losses.Loss):
  """Cross-entropy of probabilities against class ids or soft labels, smoothed and class-weighted.

  Each example's loss is weighted by its label's class weight (a soft
  label's, by the mix of its classes' weights), then averaged over the batch
  as Keras does; so with --class_weights=balanced, validation loss is the
  weighted loss too (accuracy is not weighted).
  """

  def __init__(self, label_smoothing: float = 0.0,
               class_weights: Optional[Sequence[float]] = None, name: str = "classifier_loss",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.label_smoothing = float(label_smoothing)
    # Plain floats, made tensors in call: the Estimator runs this in a graph of its own.
    self.class_weights = None if class_weights is None else [float(w) for w in class_weights]

  def call(self, y_true, y_pred):
    labels = _as_distribution(y_true, y_pred.shape[-1])
    loss = keras.losses.categorical_crossentropy(labels, y_pred,
                                                 label_smoothing=self.label_smoothing)
    if self.class_weights is not None:
      loss *= tf.linalg.matvec(labels, tf.constant(self.class_weights, tf.float32))
    return loss

  def get_config(self):
    config = super().get_config()
    config.update(label_smoothing=self.label_smoothing, class_weights=self.class_weights)
    return config


def _accuracy(y_true, y_pred):
  labels = tf.argmax(_as_distribution(y_true, y_pred.shape[-1]), axis=-1)
  return tf.cast(tf.equal(labels, tf.argmax(y_pred, axis=-1)), tf.float32)


@keras.saving.register_keras_serializable(package="audioclf")
class Accuracy(keras.metrics.MeanMetricWrapper):
  """The share of examples whose most probable class is their label's (a soft label's largest)."""

  def __init__(self, name: str = "accuracy", dtype=None):
    super().__init__(_accuracy, name=name, dtype=dtype)

  def get_config(self):
    return {"name": self.name, "dtype": self.dtype}


def loss(params: Params, class_counts: Optional[Sequence[int]] = None):
  """The loss `params` ask for; class weights need the training split's `class_counts`."""
  weights = None
  if params.class_weights == "balanced" and class_counts is not None:
    weights = balanced_weights(class_counts)
  if not (params.label_smoothing or weights or params.mixup_alpha):
    return keras.losses.SparseCategoricalCrossentropy()
  return ClassifierLoss(params.label_smoothing, weights)


def accuracy(params: Params):
  """Accuracy of class ids, or of class ids and soft labels alike where mixup makes them."""
  if params.mixup_alpha:
    return Accuracy(name="accuracy")
  return keras.metrics.SparseCategoricalAccuracy(name="accuracy")
