"""The limits that join Params' fields: each a generator of messages led by the flag to change."""

from __future__ import annotations

from typing import Iterator

from audioclf.params.choices import (
  BEST_METRICS,
  BUILDERS_OPTIMIZER,
  DATA_SERVICE_ADDRESS,
  MODEL_NAME,
)
from audioclf.params.model_args import flag_value
from audioclf.params.rule import range_fields


def joint_problems(p) -> Iterator[str]:
  """The limits that join the fields of Params `p`, each message led by the flag to change."""
  for problems in (_model_problems, _range_problems, _label_problems, _feature_problems,
                   _training_problems, _input_problems):
    yield from problems(p)


def _model_problems(p) -> Iterator[str]:
  """The model's name, and how the optimizer flags go with a builder's own optimizer."""
  if not MODEL_NAME.match(p.model):
    yield (f"--model={p.model}: must be a registered model's name (cnn, ds_cnn, ...) or "
           "module:function")
  if p.optimizer == BUILDERS_OPTIMIZER and p.lr_schedule != "constant":
    yield (f"--lr_schedule={p.lr_schedule}: --optimizer=model keeps the builder's own learning "
           "rate (and schedule); leave --lr_schedule constant")
  if "learning_rate" in p.optimizer_args and p.optimizer != BUILDERS_OPTIMIZER:
    yield (f"--optimizer_args={p.optimizer_args.flag()}: give the learning rate as "
           "--learning_rate (optimizer_args may set it only with --optimizer=model)")


def _range_problems(p) -> Iterator[str]:
  """The min,max fields: min <= max."""
  for name in sorted(range_fields(type(p))):
    low, high = getattr(p, name)
    if low > high:
      yield f"--{name}={flag_value(getattr(p, name))}: must be min,max with min <= max"


def _label_problems(p) -> Iterator[str]:
  """The wanted words, the unknown ones, and the splits that leave files to train on."""
  words = flag_value(p.wanted_words)
  if len(set(p.wanted_words)) != len(p.wanted_words):
    yield f"--wanted_words={words}: must not repeat a word"
  for word in p.wanted_words:
    if word.startswith("_") or "/" in word:
      yield (f"--wanted_words={words}: {word!r} cannot be a wanted word (names starting with _ "
             "are _unknown_, _silence_ and folders that hold no label)")
  if p.unknown_percent and not p.wanted_words:
    yield (f"--unknown_percent={p.unknown_percent}: needs --wanted_words (the labels outside "
           "them are the unknown ones)")
  if p.validation_percent + p.testing_percent >= 100:
    yield (f"--validation_percent={p.validation_percent} + --testing_percent={p.testing_percent}: "
           "must be < 100, or no file is left to train on")


def _feature_problems(p) -> Iterator[str]:
  """The log-mel's frequencies and frames against the sample rate and the clip."""
  nyquist = p.sample_rate / 2
  if p.fmax > nyquist:
    yield (f"--fmax={p.fmax}: must be <= sample_rate/2 = {nyquist:g} Hz, the highest frequency "
           f"--sample_rate={p.sample_rate} holds")
  if p.fmin >= p.fmax:
    yield f"--fmin={p.fmin}: must be < --fmax={p.fmax}"
  sample_ms = 1000.0 / p.sample_rate
  for name in ("frame_ms", "stride_ms"):
    if int(round(p.sample_rate * getattr(p, name) / 1000.0)) < 1:  # As LogMelSpectrogram rounds.
      yield (f"--{name}={getattr(p, name)}: must be at least one sample, {sample_ms:g} ms "
             f"at --sample_rate={p.sample_rate}")
  if p.frame_ms > p.clip_seconds * 1000.0:
    yield f"--frame_ms={p.frame_ms}: must fit in a clip, --clip_seconds={p.clip_seconds}"


def _training_problems(p) -> Iterator[str]:
  """A tuner trial's steps, and what early stopping needs."""
  if p.trial_steps < p.trial_epochs:
    yield (f"--trial_steps={p.trial_steps}: must be >= --trial_epochs={p.trial_epochs}, "
           "as each of a trial's epochs is trial_steps/trial_epochs steps")
  if p.early_stopping_patience and p.keep_best == "none":
    yield (f"--early_stopping_patience={p.early_stopping_patience}: needs --keep_best="
           f"{' or '.join(BEST_METRICS)}, the metric it watches")
  if p.early_stopping_patience and not p.eval_every_steps:
    yield (f"--early_stopping_patience={p.early_stopping_patience}: needs --eval_every_steps > 0 "
           "(with 0 the run evaluates once, at its end)")


def _input_problems(p) -> Iterator[str]:
  """Where batches come from (a tf.data service) and go to (a device)."""
  if p.data_service is not None and not DATA_SERVICE_ADDRESS.match(p.data_service):
    yield f"--data_service={p.data_service}: must be grpc://host:port, a dispatcher's address"
  if p.prefetch_device not in ("auto", "none", "") and not p.prefetch_device.startswith("/"):
    yield (f"--prefetch_device={p.prefetch_device}: must be auto, none or a device name such as "
           "/gpu:0")
