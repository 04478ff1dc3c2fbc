"""The parity report: the legacy and the migrated model on the same held-out clips, side by side."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any, Optional, Sequence

import numpy as np

from audioclf.compat import keras
from audioclf.data import decode
from audioclf.data import manifest as manifest_lib
from audioclf.deploy import predict as predict_lib
from audioclf.migration import legacy_estimator, legacy_predict, team
from audioclf.migration.checkpoint import MigrationError
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import Params

LEGACY_PROBABILITIES_FILE = "legacy_probabilities.npz"  # What --report keeps in to_model_dir.
# The checkout this audioclf runs from: legacy-stack subprocesses run its code, too.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def legacy_python() -> Optional[str]:
  """The legacy stack's Python: $AUDIOCLF_LEGACY_PYTHON or the checkout's .venv-legacy, or None."""
  path = os.environ.get("AUDIOCLF_LEGACY_PYTHON")
  if path:
    return path
  path = os.path.join(_CHECKOUT, ".venv-legacy", "bin", "python")
  return path if os.path.isfile(path) else None


def legacy_env() -> dict[str, str]:
  """The environment of a legacy-stack subprocess: this checkout's audioclf first on its path."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      p for p in (_CHECKOUT, os.environ.get("PYTHONPATH")) if p))
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return env


def the_legacy_python(python: Optional[str], needs: str, instead: str) -> str:
  """`python`, else `legacy_python()`; raises MigrationError naming both ways to do without.

  Args:
    python: the legacy stack's Python the caller was given, if any.
    needs: what needs the legacy stack ("--report needs the Estimator's probabilities from").
    instead: what else may be given ("--legacy_probabilities=<...>").
  """
  python = python or legacy_python()
  if not python:
    raise MigrationError(f"{needs} the legacy stack: give --legacy_python=<its python> (or set "
                         f"AUDIOCLF_LEGACY_PYTHON), or {instead}")
  return python


def legacy_probabilities(python: str, from_model_dir: str, files: Sequence[str], out: str,
                         params: Optional[Params] = None, timeout: float = 600,
                         checkpoint: str = "best") -> None:
  """Runs `python -m audioclf predict --save_probabilities=out` with the legacy stack's Python.

  This checkout's audioclf is put first on the subprocess's path, so both
  stacks run the same code.

  Raises:
    MigrationError: the legacy run failed (its stderr's end in the message).
  """
  overrides = []
  if params is not None:
    overrides = [f"--batch_size={params.batch_size}", f"--on_bad_file={params.on_bad_file}"]
  cmd = [python, "-m", "audioclf", "predict", f"--model_dir={from_model_dir}",
         f"--checkpoint={checkpoint}", f"--save_probabilities={out}", *overrides, "--", *files]
  proc = subprocess.run(cmd, env=legacy_env(), capture_output=True, text=True, timeout=timeout)
  if proc.returncode != 0 or not os.path.isfile(out):
    raise MigrationError(f"the legacy model's predictions failed ({python} -m audioclf predict, "
                         f"exit {proc.returncode}): {proc.stderr[-2000:]}")


def per_class_accuracy(probs: np.ndarray, truth: np.ndarray, labels: Sequence[str]
                       ) -> dict[str, Optional[float]]:
  """Accuracy on the clips of each class (None for a class without clips)."""
  predicted = np.argmax(probs, axis=1)
  return {label: (float(np.mean(predicted[truth == i] == i)) if np.any(truth == i) else None)
          for i, label in enumerate(labels)}


def parity_report(from_model_dir: str, to_model_dir: str, params: Optional[Params] = None,
                  split: str = "validation", probabilities_file: Optional[str] = None,
                  python: Optional[str] = None, checkpoint: str = "best") -> dict[str, Any]:
  """The legacy and the migrated model on the same held-out clips, side by side.

  Args:
    from_model_dir: the legacy model_dir.
    to_model_dir: its migration.
    params: the data to take clips and true labels from, and the batch size
      (default to_model_dir's params.json).
    split: the split whose clips are compared, unless probabilities_file is given.
    probabilities_file: what `audioclf predict --save_probabilities` wrote on
      the legacy stack: its clips are compared.
    python: the legacy stack's Python, run to compute the legacy
      probabilities when no file is given (default `legacy_python()`).
    checkpoint: which checkpoint of each model_dir is compared: best (where
      the run kept one, and migrate carried it; else the latest) or last.

  Returns:
    {"clips", "split", "checkpoint", "steps" (the migrated checkpoint's),
    "labels", "legacy_accuracy", "migrated_accuracy",
    "legacy_per_class", "migrated_per_class", "max_abs_difference",
    "same_prediction" (share of clips whose top class agrees), "legacy_source"}.

  Raises:
    MigrationError: no source of legacy probabilities, a failed legacy run, or
      clips the data does not hold.
  """
  params = params or model_dir_lib.read_params(to_model_dir)
  labels = model_dir_lib.read_labels(to_model_dir)
  manifest = manifest_lib.load(params)
  truth_of = {os.path.realpath(e.path): e.label for s in ("train", "validation", "test")
              for e in manifest.split(s)}
  if probabilities_file is None:
    probabilities_file = os.path.join(to_model_dir, LEGACY_PROBABILITIES_FILE)
    source = _predict_on_the_legacy_stack(python, from_model_dir, probabilities_file, params,
                                          manifest, split, checkpoint)
  else:
    source = probabilities_file
    split = None
  files, legacy = _legacy_probabilities(probabilities_file, labels, to_model_dir, truth_of,
                                        params)
  chosen = model_dir_lib.choose_checkpoint(to_model_dir, checkpoint)
  migrated_files, migrated, _ = predict_lib.probabilities(
      to_model_dir, files, params.replace(on_bad_file="fail"), chosen.path)
  truth = np.array([labels.index(truth_of[os.path.realpath(f)]) for f in files])
  return {
      "clips": len(files),
      "split": split,
      **chosen.record(),
      "labels": labels,
      **_accuracies(legacy, migrated, truth, labels),
      **_agreement(legacy, migrated),
      "legacy_source": source,
  }


def _legacy_probabilities(probabilities_file: str, labels: Sequence[str], to_model_dir: str,
                          truth_of: dict[str, str], params: Params) -> tuple[list[str], np.ndarray]:
  """(files, probabilities) of a legacy predict file, checked to be of these labels and this data."""
  files, legacy, legacy_labels = predict_lib.load_probabilities(probabilities_file)
  if legacy_labels != labels:
    raise MigrationError(f"{probabilities_file!r} is of a model with labels {legacy_labels}, "
                         f"{to_model_dir!r} has {labels}")
  unknown = [f for f in files if os.path.realpath(f) not in truth_of]
  if unknown:
    raise MigrationError(f"{len(unknown)} clips of {probabilities_file!r} are not in the data "
                         f"{_data(params)!r}, e.g. {unknown[0]!r}")
  return files, legacy


def _data(params: Params) -> str:
  """The data source of `params`, as reports name it."""
  return params.data_dir or params.manifest


def _held_out(params: Params, manifest: manifest_lib.Manifest,
              split: str) -> list[manifest_lib.Example]:
  """The examples of `split`; raises MigrationError where it has none."""
  examples = manifest.split(split)
  if not examples:
    raise MigrationError(f"the {split} split of {_data(params)!r} is empty")
  return examples


def _predict_on_the_legacy_stack(python: Optional[str], from_model_dir: str, out: str,
                                 params: Params, manifest: manifest_lib.Manifest, split: str,
                                 checkpoint: str) -> str:
  """The legacy model's probabilities of `split`'s clips into `out`; their source, in words."""
  python = the_legacy_python(
      python, "--report needs the legacy model's probabilities from",
      "--legacy_probabilities=<a file `python -m audioclf predict --save_probabilities=` wrote "
      "there>")
  files = [e.path for e in _held_out(params, manifest, split)]
  legacy_probabilities(python, from_model_dir, files, out, params, checkpoint=checkpoint)
  return f"{python} -m audioclf predict"


def _accuracies(legacy: np.ndarray, migrated: np.ndarray, truth: np.ndarray,
                labels: Sequence[str]) -> dict[str, Any]:
  """Both models' accuracy on clips of known labels `truth`, in all and per class."""
  return {
      "legacy_accuracy": float(np.mean(np.argmax(legacy, 1) == truth)),
      "migrated_accuracy": float(np.mean(np.argmax(migrated, 1) == truth)),
      "legacy_per_class": per_class_accuracy(legacy, truth, labels),
      "migrated_per_class": per_class_accuracy(migrated, truth, labels),
  }


def _agreement(legacy: np.ndarray, migrated: np.ndarray) -> dict[str, float]:
  """How close the two models' probabilities are, and how often their top classes agree."""
  return {
      "max_abs_difference": float(np.max(np.abs(legacy - migrated))),
      "same_prediction": float(np.mean(np.argmax(legacy, 1) == np.argmax(migrated, 1))),
  }


def report_table(report: dict[str, Any]) -> str:
  """The parity report as a plain-text table: one row per class, then the totals."""
  def cell(value):
    return f"{value:9.3f}" if value is not None else f"{'-':>9s}"

  if "legacy_per_class" not in report:  # A team's model on inputs without labels.
    step = ""
    if "next_step_max_abs_difference" in report:
      step = (f"; after the next step, max |w_legacy - w_migrated| = "
              f"{report['next_step_max_abs_difference']:.3g} over {report['next_step_weights']} "
              "weights")
    return (f"{report['inputs']} inputs; max |p_legacy - p_migrated| = "
            f"{report['max_abs_difference']:.3g}; same top class on "
            f"{100 * report['same_prediction']:.1f}%{step}")
  width = max(len("class"), *(len(label) for label in report["labels"]))
  lines = [f"{'class':<{width}s} {'legacy':>9s} {'migrated':>9s}"]
  for label in report["labels"]:
    lines.append(f"{label:<{width}s} {cell(report['legacy_per_class'][label])} "
                 f"{cell(report['migrated_per_class'][label])}")
  lines.append(f"{'all':<{width}s} {cell(report['legacy_accuracy'])} "
               f"{cell(report['migrated_accuracy'])}")
  lines.append(f"{report.get('clips', report.get('inputs'))} clips; max |p_legacy - p_migrated| = "
               f"{report['max_abs_difference']:.3g}; same top class on "
               f"{100 * report['same_prediction']:.1f}%")
  return "\n".join(lines)


def estimator_report(from_model_dir: str, to_model_dir: str, inputs_file: Optional[str] = None,
                     params: Optional[Params] = None, split: str = "validation",
                     probabilities_file: Optional[str] = None, python: Optional[str] = None
                     ) -> dict[str, Any]:
  """The parity report of a team's Estimator (migrate_estimator) and its model.keras.

  The inputs are an .npz keyed by the model's input name (or x_<name>), or,
  for a model_dir of a raw-audio model, the `split`'s clips of its data (then
  with true labels and per-class accuracy, as `parity_report`). The legacy
  probabilities come from a file (an .npz holding `probabilities`, one row per
  input: legacy_predict's output, or tests/fixtures/foreign's parity.npz), or
  from running legacy_predict with the legacy stack's Python.

  Returns:
    {"inputs", "split", "labels", "max_abs_difference", "same_prediction",
    "legacy_source"}, and with true labels "legacy_accuracy",
    "migrated_accuracy", "legacy_per_class", "migrated_per_class"; for an
    Estimator of no Keras model, where the inputs hold a training batch
    (step_x_<name>, step_y) and the legacy file the Estimator's variables
    after one step on it (next/<variable>), "next_step_max_abs_difference"
    and "next_step_weights": the migrated model's weights after its own step.

  Raises:
    MigrationError: no inputs, no legacy probabilities, or either of another shape.
  """
  with open(os.path.join(to_model_dir, team.RECORD_FILE)) as f:
    record = json.load(f)
  model = keras.saving.load_model(os.path.join(to_model_dir, team.KERAS_FILE))
  features, split, labels, truth = _features(record, to_model_dir, inputs_file, params, split)
  # A one-input model takes the array itself (a dict draws Keras 3's structure warning).
  inputs = next(iter(features.values())) if len(features) == 1 else features
  # A name-based Estimator's next step is compared where the inputs hold a training batch.
  step = (legacy_estimator.step_batch_of(inputs_file)
          if inputs_file and record.get("variables") else None)
  if probabilities_file is None:
    probabilities_file = os.path.join(to_model_dir, LEGACY_PROBABILITIES_FILE)
    source = _run_legacy_predict(python, from_model_dir, record, features, probabilities_file,
                                 step)
  else:
    source = probabilities_file
  with np.load(probabilities_file) as saved:
    legacy = saved[legacy_predict.PROBABILITIES]
  migrated = model.predict(inputs, batch_size=64, verbose=0)
  if legacy.shape != migrated.shape:
    raise MigrationError(f"{probabilities_file!r} holds probabilities {list(legacy.shape)}, the "
                         f"migrated model gives {list(migrated.shape)} on the inputs")
  report = {"inputs": len(migrated), "split": split, "labels": labels,
            **_agreement(legacy, migrated), "legacy_source": source}
  if truth is not None:
    report.update(_accuracies(legacy, migrated, truth, labels))
  if step is not None:
    report.update(_next_step(model, record, step, probabilities_file))
  return report


def _features(record: dict[str, Any], to_model_dir: str, inputs_file: Optional[str],
              params: Optional[Params], split: str):
  """(features by input name, split, labels, truth) of estimator_report's inputs.

  split, labels and truth are None where the inputs come from inputs_file.
  """
  labels = truth = None
  takes = record.get("inputs") or [record["input"]]  # Several: a canned model's columns.
  if inputs_file:
    features, split = {t["name"]: legacy_predict.inputs_of(inputs_file, t["name"])
                       for t in takes}, None
  elif record["model_dir"]:
    inputs, labels, truth = _clips(to_model_dir, params, split)
    features = {takes[0]["name"]: inputs}
  else:
    raise MigrationError(_no_inputs(record))
  for t in takes:
    if list(features[t["name"]].shape[1:]) != t["shape"]:
      raise MigrationError(f"the inputs {t['name']!r} are {list(features[t['name']].shape[1:])} "
                           f"each, the model takes {t['shape']}")
  return features, split, labels, truth


def _next_step(model, record: dict[str, Any], step, legacy_file: str) -> dict[str, Any]:
  """The migrated model's weights after one train_on_batch on `step`, against the Estimator's own.

  Returns:
    {"next_step_max_abs_difference", "next_step_weights"}, or {} where
    legacy_file holds none of the Estimator's next variables.
  """
  prefix = legacy_estimator.NEXT_PREFIX
  with np.load(legacy_file) as saved:
    after = {path: saved[f"{prefix}{name}"] for name, path in record["variables"].items()
             if path and f"{prefix}{name}" in saved.files}
  if not after:
    return {}
  features, labels = step
  model.train_on_batch(next(iter(features.values())) if len(features) == 1 else features, labels)
  weights = {variable.path: variable.numpy() for variable in model.weights}
  return {"next_step_max_abs_difference": float(max(
              np.max(np.abs(weights[path] - value)) for path, value in after.items())),
          "next_step_weights": len(after)}


def _clips(to_model_dir: str, params: Optional[Params], split: str
           ) -> tuple[np.ndarray, list[str], np.ndarray]:
  """The centred clips of `split` of a migrated raw-audio model_dir's data, its labels, their truth."""
  params = params or model_dir_lib.read_params(to_model_dir)
  labels = model_dir_lib.read_labels(to_model_dir)
  examples = _held_out(params, manifest_lib.load(params), split)
  inputs = np.stack([predict_lib.center_clip(
      decode.decode_file(e.path, params.sample_rate, params.resample_quality),
      params.clip_samples) for e in examples])
  return inputs, labels, np.array([labels.index(e.label) for e in examples])


def _no_inputs(record: dict[str, Any]) -> str:
  """What --report needs, where a team's model came with no inputs to compare it on."""
  if record["input"] is None:
    return (f"--report needs the inputs to compare the models on: --report_inputs=<an .npz with "
            f"an array per feature, named {', '.join(repr(t['name']) for t in record['inputs'])}>")
  shape = record["input"]["shape"]
  return (f"--report needs the inputs to compare the models on: --report_inputs=<an .npz with an "
          f"array named {record['input']['name']!r}, {shape} per example>"
          + (", or --data_dir (with --sample_rate, --clip_seconds) for this raw-audio model's "
             "clips" if len(shape) == 1 else ""))


def _run_legacy_predict(python: Optional[str], from_model_dir: str, record: dict[str, Any],
                        features: dict[str, np.ndarray], out: str, step=None,
                        timeout: float = 600) -> str:
  """Runs the Estimator's predict on the legacy stack; returns the source, in words.

  legacy_predict wraps the builder's model with model_to_estimator;
  legacy_estimator runs the team's own --estimator function (and, given
  `step`, a training batch, its next step too).

  Raises:
    MigrationError: no legacy Python, no way to make the Estimator, or its run
      failed (its stderr's end in the message).
  """
  if record.get("variables") is not None and not record.get("estimator"):
    raise MigrationError("--report needs the Estimator's probabilities: give --estimator=<the "
                         "module:function returning the team's Estimator>, run on the legacy "
                         "stack, or --legacy_probabilities=<an .npz of them>")
  module = ("audioclf.migration.legacy_estimator" if record.get("estimator")
            else "audioclf.migration.legacy_predict")
  python = the_legacy_python(
      python, "--report needs the Estimator's probabilities from",
      f"--legacy_probabilities=<the .npz `python -m {module}` wrote there>")
  with tempfile.TemporaryDirectory(prefix="audioclf-report-") as tmp:
    inputs_file = os.path.join(tmp, "inputs.npz")
    batch = {} if step is None else {**{f"step_x_{k}": v for k, v in step[0].items()},
                                     "step_y": step[1]}
    np.savez(inputs_file, **{f"x_{k}": v for k, v in features.items()}, **batch)
    how = ([f"--estimator={record['estimator']}"] if record.get("estimator") else
           [f"--model={record['builder']}", f"--model_args={json.dumps(record['model_args'])}"])
    cmd = [python, "-m", module, f"--from_model_dir={from_model_dir}", *how,
           f"--inputs={inputs_file}", f"--output={out}"]
    proc = subprocess.run(cmd, env=legacy_env(), capture_output=True, text=True,
                          timeout=timeout)
  if proc.returncode != 0 or not os.path.isfile(out):
    raise MigrationError(f"the Estimator's predictions failed ({python} -m {module}, exit "
                         f"{proc.returncode}): {proc.stderr[-2000:]}")
  return f"{python} -m {module}"
