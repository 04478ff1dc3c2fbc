"""Layers whose Keras 2 and Keras 3 versions differ in what matters: batch normalization's speed."""

from __future__ import annotations

import keras
import tensorflow as tf

from audioclf.compat.stack import KERAS3


if KERAS3:

  @keras.saving.register_keras_serializable(package="audioclf")
  class BatchNormalization(keras.layers.BatchNormalization):
    """Keras 3's BatchNormalization, trained with TensorFlow's fused kernel where that applies.

    Keras 3 normalizes a training batch with separate ops (tf.nn.moments, then
    tf.nn.batch_normalization), and so does their gradient: on the demo CNN
    that made a CPU training step 1.4x Keras 2's, whose layer calls the fused
    kernel (FusedBatchNormV3 and its one gradient op). Same weights, same
    config, same moving-average rule and the same numbers to float rounding;
    anything the fused kernel does not cover (a mask, several replicas'
    statistics, renorm, other ranks or axes, float16) takes Keras' own path,
    as does inference.
    """

    def call(self, inputs, training=None, mask=None):
      if not (training and self.trainable and self._fusable(inputs, mask)):
        return super().call(inputs, training=training, mask=mask)
      channels = inputs.shape[-1]
      gamma = self.gamma if self.scale else tf.ones([channels])
      beta = self.beta if self.center else tf.zeros([channels])
      outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
          inputs, gamma, beta, epsilon=self.epsilon, data_format="NHWC", is_training=True)
      # The kernel returns the batch variance with Bessel's correction; Keras
      # averages the plain one into its moving variance.
      count = tf.cast(tf.size(inputs) // channels, tf.float32)
      variance *= (count - 1.0) / tf.maximum(count, 1.0)
      self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
      self.moving_variance.assign(
          self.moving_variance * self.momentum + variance * (1.0 - self.momentum))
      return outputs

    def _fusable(self, inputs, mask) -> bool:
      rank = len(inputs.shape)
      return (mask is None and not self.synchronized and not self.renorm and rank == 4
              and self.axis in (-1, rank - 1) and inputs.dtype == tf.float32
              and self.epsilon >= 1.001e-5  # The kernel's floor (cuDNN's).
              and inputs.shape[-1] is not None)

else:
  # Keras 2's layer calls the fused kernel itself.
  BatchNormalization = keras.layers.BatchNormalization
