"""What a training run leaves in model_dir, and reading it back: labels, params, metrics, the model.

  <model_dir>/
    labels.txt          the label vocabulary, one per line, in id order
    params.json         the Params of the (latest) run, and the stack that wrote it
                        ("stack": TensorFlow major.minor, Keras major version)
    metrics.json        final metrics, the same dict the run prints as its last line
    checkpoint, model.ckpt-<step>.*   object-based checkpoints rooted at the Keras
                                      model, from either engine; a resumed run
                                      continues from the latest
    best/               with --keep_best: the best evaluation's checkpoint so far
      best.json         its step, metric and value, and every evaluation's value
      model.ckpt-<step>.*   that checkpoint, copied (audioclf.model.best)

evaluate, predict, export and migrate take the best checkpoint where best/
holds one, else the latest (`choose_checkpoint`).

Both engines write object-based checkpoints whose keys are those of the Keras
model (`layer_with_weights-0/kernel/...`): the Keras engine saves
`tf.train.Checkpoint(model)`, and model_to_estimator's default
`checkpoint_format="checkpoint"` saves the same graph of objects from its clone.
So `load_model` restores either engine's model_dir the same way.

Those are Keras 2's keys, on the legacy stack; Keras 3 on the current stack
names the same variables `_operations/<i>/...`. So a model_dir belongs to the
stack that wrote it (`written_by`), and a command on the other stack refuses
it, naming what to run instead (audioclf migrate, to move it to Keras 3).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Optional, Sequence

import tensorflow as tf
from google.protobuf import text_format

from audioclf import compat, files
from audioclf.compat import keras
from audioclf.model import build as models
from audioclf.model import registry
from audioclf.params import ParamError, Params, flag_value

LABELS_FILE = "labels.txt"
PARAMS_FILE = "params.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_NAME = "model.ckpt"  # The Estimator's name; the Keras engine uses it too.
CHECKPOINT_LIST = "checkpoint"  # TensorFlow's list of a folder's checkpoints, newest last.
KEEP_CHECKPOINTS = 5  # The Estimator's default, for both engines.
MIGRATION_KEY = "migration"  # params.json's record of what audioclf migrate carried, if any.
STACK_KEY = "stack"  # params.json's record of the stack that wrote it: compat.stack_record().
BEST_DIR = "best"  # <model_dir>/best/: the best checkpoint (audioclf.model.best writes it).
BEST_FILE = "best.json"  # Its record, in BEST_DIR.
CHECKPOINT_CHOICES = ("best", "last")  # What a command's --checkpoint names, besides a path.

# Fields that decide the variables or what they mean: a checkpoint only makes
# sense in a model built with the same values. (learning_rate, train_steps or
# the data may change between a run and its resume.)
ARCHITECTURE_FIELDS = ("model", "model_args", "optimizer", "optimizer_args", "sample_rate",
                       "clip_seconds", "n_mels", "frame_ms", "stride_ms", "fmin", "fmax")


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


def written_by(model_dir: str) -> dict[str, Any]:
  """The stack that wrote model_dir, as params.json records it: {"name", "tensorflow", "keras"}.

  A params.json without the record is from before audioclf ran on two stacks;
  its checkpoint's keys then tell the Keras version (tensorflow is None), and
  with no checkpoint either it is the legacy stack's, the only one there was.

  Raises:
    ModelDirError: model_dir holds no params.json.
  """
  path = os.path.join(model_dir, PARAMS_FILE)
  if not os.path.isfile(path):
    raise ModelDirError(f"{model_dir!r} holds no {PARAMS_FILE}: not a model_dir audioclf trained")
  with open(path) as f:
    record = json.load(f).get(STACK_KEY)
  if record:
    return record
  latest = own_latest_checkpoint(model_dir)
  if latest:
    major = compat.checkpoint_keras_major(name for name, _ in tf.train.list_variables(latest))
    return {"name": compat.CURRENT_STACK if major >= 3 else compat.LEGACY_STACK,
            "tensorflow": None, "keras": major}
  return {"name": compat.LEGACY_STACK, "tensorflow": "2.15", "keras": 2}


def check_stack(model_dir: str) -> None:
  """Raises ModelDirError, naming what to run, if model_dir was written by the other stack.

  Both stacks read their own Keras major version's checkpoints, whatever the
  TensorFlow minor version; Keras 2 and 3 checkpoints differ in their keys.
  """
  stack = written_by(model_dir)
  if int(stack["keras"]) == compat.stack_record()["keras"]:
    return
  wrote = (f"{model_dir!r} was written by the {stack['name']} stack (TensorFlow "
           f"{stack.get('tensorflow') or '?'}, Keras {stack['keras']})")
  here = (f"this is the {compat.STACK} stack (TensorFlow {tf.__version__}, "
          f"Keras {keras.__version__})")
  if compat.KERAS3:
    target = f"{model_dir.rstrip(os.sep)}-keras3"
    raise ModelDirError(
        f"{wrote}, and {here}, which reads it once migrated: run python -m audioclf migrate "
        f"--from_model_dir={model_dir} --to_model_dir={target} and use {target}; or run this "
        f"command on {compat.HOW_TO_GET[compat.LEGACY_STACK]}")
  raise ModelDirError(f"{wrote}, and {here}, which cannot read Keras 3 checkpoints: run this "
                      f"command on {compat.HOW_TO_GET[compat.CURRENT_STACK]}")


def check_same_model(saved: Params, params: Params, model_dir: str) -> None:
  """Raises ModelDirError if `params` would build a model the checkpoints do not fit.

  Model arguments compare with their defaults filled in: `--model_args=width=64`
  and none at all build cnn alike.
  """
  saved = saved.replace(model_args=model_arguments(saved, model_dir))
  params = params.replace(model_args=model_arguments(params, model_dir))
  diffs = [f"--{name}={flag_value(getattr(saved, name))} (was) vs "
           f"{flag_value(getattr(params, name))} (now)"
           for name in ARCHITECTURE_FIELDS if getattr(saved, name) != getattr(params, name)]
  if diffs:
    raise ModelDirError(
        f"{model_dir!r} holds a model built with other parameters: {'; '.join(diffs)}. "
        "Use the saved values or a new model_dir.")


def model_arguments(params: Params, model_dir: str):
  """params.model's arguments, defaults filled in.

  Raises:
    ModelDirError: the model cannot be found any more (its module is gone from
      the Python path) or no longer takes those arguments.
  """
  try:
    return registry.resolve(params.model).arguments(params.model_args)
  except ParamError as e:
    raise ModelDirError(f"{model_dir!r} holds a model built with {e}") from e


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
    check_stack(model_dir)  # First: the other checks' advice is for this stack's model_dirs.
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
  elif own_latest_checkpoint(model_dir):
    raise ModelDirError(f"{model_dir!r} holds checkpoints but no {PARAMS_FILE}: audioclf "
                        "cannot tell what they are. Choose a new model_dir.")
  if not write:
    return
  os.makedirs(model_dir, exist_ok=True)
  _write_text(os.path.join(model_dir, LABELS_FILE), "".join(f"{label}\n" for label in labels))
  write_params(model_dir, params)


def write_params(model_dir: str, params: Params,
                 migration: Optional[dict[str, Any]] = None) -> None:
  """Writes params.json: `params`, this stack's record (see written_by), and any migration record.

  Args:
    model_dir: the folder.
    params: the run's parameters.
    migration: what audioclf migrate carried into model_dir. A params.json
      that has one keeps it when a resumed run rewrites the file.
  """
  path = os.path.join(model_dir, PARAMS_FILE)
  if migration is None and os.path.isfile(path):
    with open(path) as f:
      migration = json.load(f).get(MIGRATION_KEY)
  record = {**params.to_dict(), STACK_KEY: compat.stack_record()}
  if migration is not None:
    record[MIGRATION_KEY] = migration
  _write_text(os.path.join(model_dir, PARAMS_FILE), json.dumps(record, indent=2, sort_keys=True)
              + "\n")


def write_metrics(model_dir: str, metrics: dict[str, Any]) -> None:
  _write_text(os.path.join(model_dir, METRICS_FILE), json.dumps(metrics, indent=2) + "\n")


def summary_line(metrics: dict[str, Any]) -> str:
  """The one-line JSON every command prints last, for scripts to parse."""
  return json.dumps(metrics, separators=(", ", ": "))


def own_latest_checkpoint(model_dir: str) -> Optional[str]:
  """The newest checkpoint model_dir's list names, found in model_dir itself; None if none.

  Read by its name in model_dir: a copied Estimator model_dir's list may still
  name the original's files by absolute path (see localize_checkpoint_list),
  and what a command reads of a model_dir must be that folder's own.
  """
  state = tf.train.get_checkpoint_state(model_dir)
  if state is None or not state.model_checkpoint_path:
    return None
  own = os.path.join(model_dir, os.path.basename(state.model_checkpoint_path))
  return own if tf.io.gfile.exists(f"{own}.index") else None


def localize_checkpoint_list(model_dir: str) -> None:
  """Rewrites <model_dir>/checkpoint so each checkpoint in model_dir is named relative to it.

  The Saver of model_to_estimator's model_fn (tf.estimator's Keras bridge,
  TF <= 2.15) writes absolute paths there. In a copy of the folder they name
  the original's files: training the copy on deleted the original's oldest
  checkpoints as its own (the Saver keeps five), and a read of the copy read
  the original. Called before an Estimator trains; paths to files not in
  model_dir are left as they are.
  """
  state = tf.train.get_checkpoint_state(model_dir)
  if state is None:
    return
  here = os.path.abspath(model_dir)

  def own(path: str) -> str:
    name = os.path.basename(path)
    inside = tf.io.gfile.exists(os.path.join(model_dir, f"{name}.index"))
    return name if inside and os.path.dirname(os.path.abspath(path)) != here else path

  paths = [own(p) for p in state.all_model_checkpoint_paths]
  latest = own(state.model_checkpoint_path)
  if latest == state.model_checkpoint_path and paths == list(state.all_model_checkpoint_paths):
    return
  state.model_checkpoint_path = latest
  del state.all_model_checkpoint_paths[:]
  state.all_model_checkpoint_paths.extend(paths)
  _write_text(os.path.join(model_dir, CHECKPOINT_LIST), text_format.MessageToString(state))


def latest_checkpoint(model_dir: str) -> str:
  path = own_latest_checkpoint(model_dir)
  if not path:
    raise ModelDirError(f"{model_dir!r} holds no checkpoint yet: train first "
                        "(python -m audioclf train --model_dir=...)")
  return path


@dataclasses.dataclass(frozen=True)
class Chosen:
  """The checkpoint a command uses, and how it was chosen."""

  path: str  # The checkpoint's prefix.
  kind: str  # "best", "last", or "path" (given by the user).
  step: int

  def record(self) -> dict[str, Any]:
    """What a command's JSON line says of it: {"checkpoint": best, last or the path, "steps"}."""
    return {"checkpoint": self.path if self.kind == "path" else self.kind, "steps": self.step}


def best_record(model_dir: str) -> Optional[dict[str, Any]]:
  """<model_dir>/best/best.json's content, or None where the run kept no best checkpoint."""
  path = os.path.join(model_dir, BEST_DIR, BEST_FILE)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def choose_checkpoint(model_dir: str, which: str = "best") -> Chosen:
  """The checkpoint `which` names in model_dir.

  Args:
    model_dir: a folder either engine trained.
    which: "best": the best checkpoint where model_dir keeps one (--keep_best),
      else the latest; "last": the latest, whatever was kept; anything else is
      a checkpoint's path (its prefix, e.g. <model_dir>/model.ckpt-400),
      called best or last where it is the one those name.

  Raises:
    ModelDirError: no checkpoint there, or none at the path given.
  """
  record = best_record(model_dir) if which == "best" else None
  if record is not None:
    path = os.path.join(model_dir, BEST_DIR, record["checkpoint"])
    if not tf.io.gfile.exists(f"{path}.index"):
      raise ModelDirError(f"{os.path.join(model_dir, BEST_DIR, BEST_FILE)} names "
                          f"{record['checkpoint']}, which is not there: use --checkpoint=last")
    return Chosen(path, "best", checkpoint_step(path))
  if which in CHECKPOINT_CHOICES:
    path = latest_checkpoint(model_dir)
    return Chosen(path, "last", checkpoint_step(path))
  if not tf.io.gfile.exists(f"{which}.index"):
    raise ModelDirError(f"--checkpoint={which}: no such checkpoint (give best, last, or a "
                        "checkpoint's prefix such as <model_dir>/model.ckpt-400)")
  # A chosen checkpoint handed on by path (commands choose once) keeps its name.
  where = os.path.dirname(os.path.abspath(which))
  if where == os.path.abspath(os.path.join(model_dir, BEST_DIR)):
    kind = "best"
  else:
    latest = own_latest_checkpoint(model_dir)
    kind = "last" if latest and os.path.abspath(latest) == os.path.abspath(which) else "path"
  return Chosen(which, kind, checkpoint_step(which))


def checkpoint_manager(checkpoint: tf.train.Checkpoint, directory: str,
                       max_to_keep: int = KEEP_CHECKPOINTS) -> tf.train.CheckpointManager:
  """Saves `checkpoint` (a `tf.train.Checkpoint(model)`) into directory as every Keras path does.

  The Keras engine, the tuner's best model and audioclf migrate write their
  checkpoints through it, named as the Estimator names its own. Save with
  `checkpoint_number=` the global step.
  """
  return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                    checkpoint_name=CHECKPOINT_NAME)


def checkpoint_step(path: str) -> int:
  """The global step a checkpoint of either engine, on either stack, was saved at."""
  reader = tf.train.load_checkpoint(path)
  for key in compat.STEP_KEYS:
    if reader.has_tensor(key):
      return int(reader.get_tensor(key))
  raise ModelDirError(f"{path!r} records no step: not a checkpoint audioclf wrote")


def load_model(model_dir: str, params: Optional[Params] = None,
               checkpoint: str = "best") -> tuple[keras.Model, Params, list[str]]:
  """The trained, compiled Keras model of a model_dir from either engine of this stack.

  Args:
    model_dir: a folder a training run wrote.
    params: the parameters to use instead of params.json (data or batch size
      may change; the architecture fields must match the saved ones).
    checkpoint: best (where model_dir keeps one, else the latest), last, or a
      checkpoint's path: see choose_checkpoint.

  Returns:
    (model, params, labels).

  Raises:
    ModelDirError: no params.json, labels.txt or checkpoint, params that
      build another model, or a model_dir of the other stack.
  """
  saved = read_params(model_dir)
  check_stack(model_dir)
  params = params or saved
  check_same_model(saved, params, model_dir)
  labels = read_labels(model_dir)
  checkpoint = choose_checkpoint(model_dir, checkpoint).path
  model = models.build_model(params, len(labels))
  # Compile before restoring, with the run's optimizer family: the checkpoint
  # holds optimizer slots, and a deferred restore of a legacy (Estimator)
  # optimizer's slots into a v2 optimizer raises, while a matching one is fine.
  models.compile_model(model, params.replace(engine=saved.engine))
  # Both engines write tf.train.Checkpoint(model). Keras 2's load_weights reads
  # that format too, but Keras 3's reads only .weights.h5 files.
  # Every variable of the model must come from the checkpoint; the optimizer's
  # slots are left unused, since evaluation and export never create them.
  assert_matched(tf.train.Checkpoint(model).read(checkpoint), checkpoint).expect_partial()
  return model, params, labels


def assert_matched(status, checkpoint: str):
  """`status` (of a checkpoint's restore) once every variable of the model came from it.

  Raises:
    ModelDirError: a variable the checkpoint has no value for: the model's
      code changed since the checkpoint was written.
  """
  try:
    return status.assert_existing_objects_matched()
  except AssertionError as e:
    missing = re.findall(r"path=([^,]+)", str(e)) or re.findall(r"name=([^,]+)", str(e))
    raise ModelDirError(f"{checkpoint} holds no value for {', '.join(missing[:3]) or 'some'} of "
                        "the variables its params.json builds: the model's code changed since "
                        "it was written; train into a new model_dir") from None


def _write_text(path: str, text: str) -> None:
  files.atomic_write(path, text.encode("utf-8"))  # A reader (or a crash) never sees half a file.


def write_whole(path: str, write: Callable[[str], None]) -> None:
  """write(folder) into a new folder beside `path`, then renamed to `path`: whole or not at all.

  `path` must not exist, or be an empty folder. A failure (or a kill) leaves
  no half-written model_dir behind: only a hidden temporary folder, removed
  where the process lives to do it.
  """
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=".writing-", dir=parent)
  try:
    write(tmp)
    if os.path.isdir(path):
      os.rmdir(path)  # Empty, as the caller checked.
    os.rename(tmp, path)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
