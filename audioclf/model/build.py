"""The model builders: one `build_model` and one `compile_model` for every engine, the tuner and export.

  model = build_model(params, num_classes=len(labels))   # raw waveform in, probabilities out
  compile_model(model, params)
"""

from __future__ import annotations

import inspect
from typing import Optional, Sequence

from audioclf import compat
from audioclf.compat import keras
from audioclf.model import losses, registry
from audioclf.model.features import LogMelSpectrogram, SpecAugment
from audioclf.params import BUILDERS_OPTIMIZER, OPTIMIZERS, ParamError, Params

INPUT_NAME = "waveform"  # Must equal input_fn's features key: model_to_estimator maps by name.
OUTPUT_NAME = "probabilities"

layers = keras.layers


def build_model(params: Params, num_classes: int) -> keras.Model:
  """The classifier `params.model` describes, from raw audio to class probabilities.

  The model is found by audioclf.model.registry (a registered name or
  module:function) and built with its own arguments, params.model_args. A
  body gets audioclf's front end (`front_end`) or the raw waveform, as its
  first parameter asks, and audioclf's head (dropout, a softmax layer); a
  whole model is taken as it is.

  Args:
    params: the run's parameters (sample rate, clip length, features, model).
    num_classes: size of the label vocabulary (`len(manifest.labels)`); passed
      in so that building a model never scans the data.

  Returns:
    An uncompiled functional keras.Model: inputs {"waveform": float32
    [batch, clip_samples]} (call it with `inputs(waveforms)`), output
    "probabilities" float32 [batch, num_classes].

  Raises:
    ParamError: an unknown model, arguments it does not take, or a whole
      model whose input or output does not fit.
    ValueError: fewer than two classes.
  """
  if num_classes < 2:
    raise ValueError(f"a classifier needs at least two classes, got num_classes={num_classes}")
  model = registry.resolve(params.model)
  args = model.arguments(params.model_args)
  waveform = keras.Input(shape=(params.clip_samples,), dtype="float32", name=INPUT_NAME)
  if model.kind == registry.WHOLE:
    probabilities = _whole_model(model, args, params, num_classes)(waveform)
  else:
    x = front_end(waveform, params) if model.kind == "spectrogram" else waveform
    x = model.function(x, params, **args)
    x = layers.Dropout(params.dropout, name="dropout")(x)
    probabilities = layers.Dense(num_classes, activation="softmax", name=OUTPUT_NAME)(x)
  # Inputs as a dict, the structure input_fn's features have: Keras 3 warns on
  # every call whose inputs are shaped otherwise.
  return keras.Model({INPUT_NAME: waveform}, probabilities, name=model.function.__name__)


def front_end(waveform, params: Params):
  """audioclf's front end: log-mel, SpecAugment (training only), per-clip normalization.

  waveform [batch, clip_samples] -> [batch, frames, n_mels, 1].
  """
  log_mel = LogMelSpectrogram.from_params(params, name="log_mel")
  x = log_mel(waveform)
  # The layer is there with or without masks: Keras 3 keys a checkpoint by
  # layer position, so --spec_augment must not move the layers after it (a
  # model_dir then restores with the flag either way, as on Keras 2).
  x = spec_augment(params, log_mel.num_frames(params.clip_samples))(x)
  x = layers.Reshape((-1, params.n_mels, 1), name="add_channel")(x)
  # Standardise each clip's log-mel over time and frequency. A log-mel level
  # moves with the recording gain, which says nothing about the class; and a
  # per-clip statistic, unlike an input BatchNormalization, has no running
  # average that a short run leaves far from the data (it made a model that fit
  # its training batches score at chance in inference mode after 60 steps).
  return layers.LayerNormalization(axis=[1, 2], center=False, scale=False, name="normalize")(x)


def spec_augment(params: Params, frames: int) -> SpecAugment:
  """The SpecAugment layer of --freq_masks, --time_masks and their widths (none: no masks)."""
  on = params.spec_augment
  bins = params.freq_mask_bins
  width = params.time_mask_frames
  return SpecAugment(freq_masks=params.freq_masks if on else 0,
                     max_freq_bins=max(1, params.n_mels // 5) if bins is None else bins,
                     time_masks=params.time_masks if on else 0,
                     max_time_frames=max(1, frames // 10) if width is None else width,
                     name="spec_augment")


def _whole_model(model: registry.Model, args, params: Params, num_classes: int) -> keras.Model:
  """A whole-model builder's model, checked to take a clip of raw audio and give num_classes."""
  built = model.function(**args)
  if not isinstance(built, keras.Model) or len(built.inputs) != 1:
    raise ParamError(f"--model={params.model}: {model.target} must return a keras.Model of "
                     f"one input (raw audio), got {type(built).__name__}")
  takes = tuple(built.inputs[0].shape[1:])
  gives = built.outputs[0].shape[-1] if len(built.outputs) == 1 else None
  if takes != (params.clip_samples,) or gives != num_classes:
    raise ParamError(
        f"--model={params.model}: {model.target}'s model takes {list(takes)} and gives "
        f"{gives} classes; this run has clips of {params.clip_samples} samples (sample_rate "
        f"{params.sample_rate} x clip_seconds {params.clip_seconds}) and {num_classes} labels")
  return built


def inputs(waveforms):
  """The model's inputs for waveforms [batch, clip_samples]: the dict the model was built with."""
  return {INPUT_NAME: waveforms}


def predict_fn(model: keras.Model):
  """`model` as a function of float32 waveforms [batch, clip_samples] -> probabilities (numpy)."""
  return lambda waveforms: model.predict_on_batch(inputs(waveforms))


def make_optimizer(params: Params, model: Optional[keras.Model] = None
                   ) -> keras.optimizers.Optimizer:
  """The optimizer `params.optimizer` names, at `params.learning_rate` and its schedule.

  The Estimator engine gets the optimizer family model_to_estimator needs
  (`compat.optimizers`). `--optimizer=model` is the optimizer `model`'s whole
  model was compiled with by its builder, as it is; params.optimizer_args
  change any optimizer's constructor arguments.

  Raises:
    ValueError: an unknown optimizer name.
    ParamError: optimizer_args the optimizer does not take; --optimizer=model
      without a whole model compiled by its builder.
  """
  if params.optimizer == BUILDERS_OPTIMIZER:
    return _builders_optimizer(params, model)
  if params.optimizer not in OPTIMIZERS:
    raise ValueError(f"unknown optimizer {params.optimizer!r}; choose one of {sorted(OPTIMIZERS)}")
  family = compat.optimizers(for_estimator=params.engine == "estimator")
  optimizer_class = getattr(family, OPTIMIZERS[params.optimizer])
  takes = [name for name, p in inspect.signature(optimizer_class).parameters.items()
           if p.kind == p.POSITIONAL_OR_KEYWORD and name != "learning_rate"]
  _check_optimizer_args(params, optimizer_class.__name__, takes)
  return optimizer_class(learning_rate=learning_rate(params), **params.optimizer_args)


def _builders_optimizer(params: Params, model: Optional[keras.Model]):
  """The optimizer the whole model inside `model` was compiled with, changed by optimizer_args."""
  whole = [layer for layer in getattr(model, "layers", ()) if isinstance(layer, keras.Model)]
  optimizer = getattr(whole[0], "optimizer", None) if len(whole) == 1 else None
  if optimizer is None:
    raise ParamError(f"--optimizer=model: the optimizer a whole model's builder compiled it "
                     f"with, and --model={params.model} "
                     f"{'builds no whole model' if len(whole) != 1 else 'returns it uncompiled'}")
  if not params.optimizer_args:
    return optimizer  # The very object: the builder's model and audioclf's train it alike.
  config = optimizer.get_config()
  _check_optimizer_args(params, type(optimizer).__name__, [k for k in config if k != "name"])
  return type(optimizer).from_config({**config, **params.optimizer_args})


def _check_optimizer_args(params: Params, optimizer: str, takes: list[str]) -> None:
  unknown = sorted(set(params.optimizer_args) - set(takes))
  if unknown:
    raise ParamError(f"--optimizer_args={params.optimizer_args.flag()}: {optimizer} takes no "
                     f"argument {unknown[0]!r}; it takes {', '.join(takes)}")


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


def compile_model(model: keras.Model, params: Params,
                  class_counts: Optional[Sequence[int]] = None) -> keras.Model:
  """Compiles `model` with the run's optimizer, the loss and the metric every engine reports.

  Args:
    model: build_model's model.
    params: the run's parameters (optimizer, label smoothing, mixup, class weights).
    class_counts: the training split's examples per class id, which
      --class_weights=balanced weighs by; training passes them (both engines
      and the tuner), a model compiled only to evaluate needs none.

  Returns:
    `model`, for chaining.
  """
  model.compile(optimizer=make_optimizer(params, model),
                loss=losses.loss(params, class_counts),
                metrics=[losses.accuracy(params)])
  return model
