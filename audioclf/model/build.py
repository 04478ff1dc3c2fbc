"""The model builders: one `build_model` and one `compile_model` for every engine, the tuner and export.

  model = build_model(params, num_classes=len(labels))   # raw waveform in, probabilities out
  compile_model(model, params)
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from audioclf import compat
from audioclf.compat import keras
from audioclf.model.features import LogMelSpectrogram, SpecAugment
from audioclf.params import OPTIMIZERS, Params

INPUT_NAME = "waveform"  # Must equal input_fn's features key: model_to_estimator maps by name.
OUTPUT_NAME = "probabilities"

layers = keras.layers


def _batch_norm(name):
  # Momentum 0.9 (PyTorch's default), not Keras' 0.99: after N steps the moving
  # variance still holds 0.99**N of its initial 1.0, which swamps the real
  # statistic of a deep layer whose activations vary by 0.002 for several
  # hundred steps; a DS-CNN trained fine yet scored at chance in inference mode.
  # Under several replicas (tf.distribute), statistics of the global batch:
  # every replica keeps the same moving statistics, so each evaluates (and
  # the checkpoint holds) what one process training that batch would.
  return compat.BatchNormalization(momentum=0.9, name=name, synchronized=_several_replicas())


def _several_replicas() -> bool:
  return tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1


def _conv_bn_relu(x, filters, kernel, strides=1, name=""):
  # No bias before batch norm: its shift would be cancelled by the mean it subtracts.
  x = layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False,
                    name=f"{name}conv")(x)
  x = _batch_norm(f"{name}bn")(x)
  return layers.ReLU(name=f"{name}relu")(x)


def cnn(spectrogram: tf.Tensor, params: Params) -> tf.Tensor:
  """A small VGG-style CNN: three conv/pool blocks, an average over time, then flatten.

  Averaging over time only keeps where in frequency the energy sits: a
  global average would leave a model of 3x3 kernels blind to pitch, except
  through the zero padding at the band edges.
  """
  x = spectrogram
  for i, filters in enumerate((params.width, 2 * params.width, 2 * params.width)):
    x = _conv_bn_relu(x, filters, 3, name=f"block{i}_")
    x = layers.MaxPool2D(2, padding="same", name=f"block{i}_pool")(x)
  # The clip length is fixed, so the frame count is static: pool it all.
  x = layers.AveragePooling2D(pool_size=(x.shape[1], 1), name="time_pool")(x)
  return layers.Flatten(name="flatten")(x)


def ds_cnn(spectrogram: tf.Tensor, params: Params) -> tf.Tensor:
  """DS-CNN of Zhang et al. 2017, "Hello Edge: Keyword Spotting on Microcontrollers".

  A strided 10x4 convolution, then four depthwise-separable blocks of `width`
  filters (64 is the paper's DS-CNN-S), then average pooling.
  """
  x = _conv_bn_relu(spectrogram, params.width, (10, 4), strides=2, name="stem_")
  for i in range(4):
    x = layers.DepthwiseConv2D(3, padding="same", use_bias=False, name=f"ds{i}_depthwise")(x)
    x = _batch_norm(f"ds{i}_depthwise_bn")(x)
    x = layers.ReLU(name=f"ds{i}_depthwise_relu")(x)
    x = _conv_bn_relu(x, params.width, 1, name=f"ds{i}_pointwise_")
  return layers.GlobalAveragePooling2D(name="pool")(x)


# Name -> body: a function of (log-mel [batch, frames, n_mels, 1], params) that
# returns pooled features [batch, dims]. build_model adds the shared front end and head.
MODELS: dict[str, Callable[[tf.Tensor, Params], tf.Tensor]] = {
    "cnn": cnn,
    "ds_cnn": ds_cnn,
}


def build_model(params: Params, num_classes: int) -> keras.Model:
  """The classifier `params.model` describes, from raw audio to class probabilities.

  Args:
    params: the run's parameters (sample rate, clip length, features, model).
    num_classes: size of the label vocabulary (`len(manifest.labels)`); passed
      in so that building a model never scans the data.

  Returns:
    An uncompiled functional keras.Model: inputs {"waveform": float32
    [batch, clip_samples]} (call it with `inputs(waveforms)`), output
    "probabilities" float32 [batch, num_classes].

  Raises:
    ValueError: an unknown model name, or fewer than two classes.
  """
  if params.model not in MODELS:
    raise ValueError(f"unknown model {params.model!r}; choose one of {sorted(MODELS)}")
  if num_classes < 2:
    raise ValueError(f"a classifier needs at least two classes, got num_classes={num_classes}")
  waveform = keras.Input(shape=(params.clip_samples,), dtype="float32", name=INPUT_NAME)
  log_mel = LogMelSpectrogram.from_params(params, name="log_mel")
  x = log_mel(waveform)
  # The layer is there with or without masks: Keras 3 keys a checkpoint by
  # layer position, so --spec_augment must not move the layers after it (a
  # model_dir then restores with the flag either way, as on Keras 2).
  frames = log_mel.num_frames(params.clip_samples)
  masks = 2 if params.spec_augment else 0
  x = SpecAugment(freq_masks=masks, max_freq_bins=max(1, params.n_mels // 5), time_masks=masks,
                  max_time_frames=max(1, frames // 10), name="spec_augment")(x)
  x = layers.Reshape((-1, params.n_mels, 1), name="add_channel")(x)
  # Standardise each clip's log-mel over time and frequency. A log-mel level
  # moves with the recording gain, which says nothing about the class; and a
  # per-clip statistic, unlike an input BatchNormalization, has no running
  # average that a short run leaves far from the data (it made a model that fit
  # its training batches score at chance in inference mode after 60 steps).
  x = layers.LayerNormalization(axis=[1, 2], center=False, scale=False, name="normalize")(x)
  x = MODELS[params.model](x, params)
  x = layers.Dropout(params.dropout, name="dropout")(x)
  probabilities = layers.Dense(num_classes, activation="softmax", name=OUTPUT_NAME)(x)
  # Inputs as a dict, the structure input_fn's features have: Keras 3 warns on
  # every call whose inputs are shaped otherwise.
  return keras.Model({INPUT_NAME: waveform}, probabilities, name=params.model)


def inputs(waveforms):
  """The model's inputs for waveforms [batch, clip_samples]: the dict the model was built with."""
  return {INPUT_NAME: waveforms}


def predict_fn(model: keras.Model):
  """`model` as a function of float32 waveforms [batch, clip_samples] -> probabilities (numpy)."""
  return lambda waveforms: model.predict_on_batch(inputs(waveforms))


def make_optimizer(params: Params) -> keras.optimizers.Optimizer:
  """The optimizer `params.optimizer` names, at `params.learning_rate` and its schedule.

  The Estimator engine gets the optimizer family model_to_estimator needs
  (`compat.optimizers`).

  Raises:
    ValueError: an unknown optimizer name.
  """
  if params.optimizer not in OPTIMIZERS:
    raise ValueError(f"unknown optimizer {params.optimizer!r}; choose one of {sorted(OPTIMIZERS)}")
  family = compat.optimizers(for_estimator=params.engine == "estimator")
  return getattr(family, OPTIMIZERS[params.optimizer])(learning_rate=learning_rate(params))


def learning_rate(params: Params):
  """params.learning_rate, or a schedule of the optimizer's step (the global step, in both engines).

  Raises:
    ValueError: an unknown schedule name.
  """
  if params.lr_schedule == "constant":
    return params.learning_rate
  if params.lr_schedule == "cosine":
    # Large steps find the region fast, small ones settle in it: the last
    # evaluations stop swinging with the noise of single batches.
    return keras.optimizers.schedules.CosineDecay(params.learning_rate, params.train_steps)
  raise ValueError(f"unknown lr_schedule {params.lr_schedule!r}; choose constant or cosine")


def compile_model(model: keras.Model, params: Params) -> keras.Model:
  """Compiles `model` with the run's optimizer, the loss and the metric every engine reports.

  Returns:
    `model`, for chaining.
  """
  model.compile(optimizer=make_optimizer(params),
                loss=keras.losses.SparseCategoricalCrossentropy(),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
  return model
