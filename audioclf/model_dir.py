"""What a training run leaves in model_dir, and reading it back: labels, params, metrics, the model.

  <model_dir>/
    labels.txt          the label vocabulary, one per line, in id order
    params.json         the Params of the (latest) run
    metrics.json        final metrics, the same dict the run prints as its last line
    checkpoint, model.ckpt-<step>.*   object-based checkpoints rooted at the Keras
                                      model, from either engine

Both engines write object-based checkpoints whose keys are those of the Keras
model (`layer_with_weights-0/kernel/...`): the Keras engine saves
`tf.train.Checkpoint(model)`, and model_to_estimator's default
`checkpoint_format="checkpoint"` saves the same graph of objects from its clone.
So `load_model` restores either engine's model_dir the same way.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

import tensorflow as tf

from audioclf.params import Params

LABELS_FILE = "labels.txt"
PARAMS_FILE = "params.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_NAME = "model.ckpt"  # The Estimator's name; the Keras engine uses it too.
KEEP_CHECKPOINTS = 5  # The Estimator's default, for both engines.

# Fields that decide the variables or what they mean: a checkpoint only makes
# sense in a model built with the same values. (learning_rate, train_steps or
# the data may change between a run and its resume.)
ARCHITECTURE_FIELDS = ("model", "width", "optimizer", "sample_rate", "clip_seconds", "n_mels",
                       "frame_ms", "stride_ms", "fmin", "fmax")


class ModelDirError(ValueError):
  """model_dir does not hold what the command needs, or holds another run."""


def read_params(model_dir: str) -> Params:
  path = os.path.join(model_dir, PARAMS_FILE)
  if not os.path.isfile(path):
    raise ModelDirError(f"{model_dir!r} holds no {PARAMS_FILE}: not a model_dir audioclf trained")
  return Params.from_json(path)


def read_labels(model_dir: str) -> list[str]:
  path = os.path.join(model_dir, LABELS_FILE)
  if not os.path.isfile(path):
    raise ModelDirError(f"{model_dir!r} holds no {LABELS_FILE}: not a model_dir audioclf trained")
  with open(path) as f:
    return [line.rstrip("\n") for line in f if line.strip()]


def check_same_model(saved: Params, params: Params, model_dir: str) -> None:
  """Raises ModelDirError if `params` would build a model the checkpoints do not fit."""
  diffs = [f"--{name}={getattr(saved, name)} (was) vs {getattr(params, name)} (now)"
           for name in ARCHITECTURE_FIELDS if getattr(saved, name) != getattr(params, name)]
  if diffs:
    raise ModelDirError(
        f"{model_dir!r} holds a model built with other parameters: {'; '.join(diffs)}. "
        "Use the saved values or a new model_dir.")


def prepare(params: Params, labels: Sequence[str], write: bool = True) -> None:
  """Makes params.model_dir ready for a run: new, or a resume of the same run.

  Writes labels.txt and params.json (unless `write` is False: in a cluster
  only the chief writes; the other tasks only check). A model_dir from another engine, another
  label vocabulary or another architecture is refused before any training, so
  a resume can never silently mix two models.

  Raises:
    ModelDirError: model_dir is unset or holds an incompatible run.
  """
  model_dir = params.model_dir
  if not model_dir:
    raise ModelDirError("model_dir is required: it receives checkpoints, logs and metrics")
  if os.path.isfile(os.path.join(model_dir, PARAMS_FILE)):
    saved = read_params(model_dir)
    if saved.engine != params.engine:
      raise ModelDirError(
          f"{model_dir!r} was trained with --engine={saved.engine}; its checkpoints do not "
          f"resume under --engine={params.engine}. Rerun with --engine={saved.engine} or "
          "choose a new model_dir.")
    check_same_model(saved, params, model_dir)
    old_labels = read_labels(model_dir)
    if old_labels != list(labels):
      raise ModelDirError(
          f"{model_dir!r} was trained on labels {old_labels}, but the data now has "
          f"{list(labels)}: the output layer would mean other classes. Use a new model_dir.")
  elif tf.train.latest_checkpoint(model_dir):
    raise ModelDirError(f"{model_dir!r} holds checkpoints but no {PARAMS_FILE}: audioclf "
                        "cannot tell what they are. Choose a new model_dir.")
  if not write:
    return
  os.makedirs(model_dir, exist_ok=True)
  _write_text(os.path.join(model_dir, LABELS_FILE), "".join(f"{label}\n" for label in labels))
  _write_text(os.path.join(model_dir, PARAMS_FILE), params.to_json() + "\n")


def write_metrics(model_dir: str, metrics: dict[str, Any]) -> None:
  _write_text(os.path.join(model_dir, METRICS_FILE), json.dumps(metrics, indent=2) + "\n")


def summary_line(metrics: dict[str, Any]) -> str:
  """The one-line JSON every command prints last, for scripts to parse."""
  return json.dumps(metrics, separators=(", ", ": "))


def latest_checkpoint(model_dir: str) -> str:
  path = tf.train.latest_checkpoint(model_dir)
  if not path:
    raise ModelDirError(f"{model_dir!r} holds no checkpoint yet: train first "
                        "(python -m audioclf.train --model_dir=...)")
  return path


def checkpoint_step(path: str) -> int:
  """The global step a checkpoint of either engine was saved at."""
  reader = tf.train.load_checkpoint(path)
  for key in ("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",  # Keras fit, v2 optimizer.
              "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",  # Keras fit, legacy optimizer.
              "estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE"):  # model_to_estimator.
    if reader.has_tensor(key):
      return int(reader.get_tensor(key))
  raise ModelDirError(f"{path!r} records no step: not a checkpoint audioclf wrote")


def load_model(model_dir: str, params: Optional[Params] = None,
               checkpoint: Optional[str] = None) -> tuple[tf.keras.Model, Params, list[str]]:
  """The trained, compiled Keras model of a model_dir from either engine.

  Args:
    model_dir: a folder a training run wrote.
    params: the parameters to use instead of params.json (data or batch size
      may change; the architecture fields must match the saved ones).
    checkpoint: a checkpoint path; default the latest in model_dir.

  Returns:
    (model, params, labels).

  Raises:
    ModelDirError: no params.json, labels.txt or checkpoint, or params that
      build another model.
  """
  from audioclf import models  # Here, so reading labels or metrics needs no Keras.

  saved = read_params(model_dir)
  params = params or saved
  check_same_model(saved, params, model_dir)
  labels = read_labels(model_dir)
  checkpoint = checkpoint or latest_checkpoint(model_dir)
  model = models.build_model(params, len(labels))
  # Compile before restoring, with the run's optimizer family: the checkpoint
  # holds optimizer slots, and a deferred restore of a legacy (Estimator)
  # optimizer's slots into a v2 optimizer raises, while a matching one is fine.
  models.compile_model(model, params.replace(engine=saved.engine))
  status = model.load_weights(checkpoint)
  # Every variable of the model must come from the checkpoint; the optimizer's
  # slots are left unused, since evaluation and export never create them.
  status.assert_existing_objects_matched().expect_partial()
  return model, params, labels


def _write_text(path: str, text: str) -> None:
  # Write then rename: a reader (or a crash) never sees half a file.
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)
