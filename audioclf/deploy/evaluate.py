"""Evaluation of a model_dir (either engine) or an exported SavedModel on one split, with its report.

`python -m audioclf evaluate` runs it (audioclf.commands.evaluate); the report
(per-class metrics, confusion matrix, errors, accuracy per group) is
audioclf.deploy.report.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from audioclf.compat import keras
from audioclf.data import manifest as manifest_lib
from audioclf.data import store as store_lib
from audioclf.data.pipeline import input_fn
from audioclf.deploy import report as report_lib
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import Params


def evaluate(model_dir: Optional[str], split: str = "validation",
             params: Optional[Params] = None, *, saved_model: Optional[str] = None,
             report_dir: Optional[str] = None, report: bool = True, checkpoint: str = "best",
             group_by: Optional[str] = None) -> dict[str, Any]:
  """Loss and accuracy of a model on `split`, and its evaluation report.

  Args:
    model_dir: a folder either engine trained.
    split: "train", "validation" or "test".
    params: parameters to use instead of model_dir's params.json, e.g. to
      point at other data; the model's own fields must match. The data's
      labels may be any of the model's (a test set without _silence_, or
      with only some of the words), matched by name. Required with
      `saved_model` unless the SavedModel's folder holds a params.json.
    saved_model: evaluate this exported SavedModel instead of model_dir.
    report_dir: where the report goes; default <model_dir or saved_model>/eval_<split>.
    report: False skips the report (loss and accuracy only).
    checkpoint: model_dir's checkpoint to evaluate: best (the one --keep_best
      kept, where there is one, else the latest), last, or a path.
    group_by: also report accuracy per group: "speaker" (the name before
      `_nohash_`) or a column of the CSV manifest (manifest.groups).

  Returns:
    {"model_dir" or "saved_model", "engine", "split", "checkpoint" (best,
    last or its path; None for a SavedModel), "steps" (the checkpoint's),
    "files", "loss", "accuracy"}, plus "report_dir" and "report"
    (report.json's content and its printable table under "text") when a
    report was written.

  Raises:
    model_dir.ModelDirError: no trained model there, or the data has a label
      the model does not know.
    manifest.DataError: a group_by that the data has no values for.
  """
  predict, params, labels, results, where = _load(model_dir, split, params, saved_model,
                                                  checkpoint)
  manifest = manifest_lib.load(params)
  to_model = model_ids(labels, manifest.labels, where)
  examples = manifest.split(split)
  groups = manifest_lib.groups(params, examples, group_by) if group_by else None
  probabilities, y_true = report_lib.classify(
      predict, input_fn(params, "eval", split=split, manifest=manifest))
  y_true = to_model[y_true]  # The data's label ids, as the model's: all that follows counts so.
  # The loss the model was compiled with, over every example at once.
  loss = keras.losses.sparse_categorical_crossentropy(y_true, probabilities)
  results.update(files=len(examples), loss=float(np.mean(loss.numpy(), dtype=np.float64)),
                 accuracy=float(np.mean(probabilities.argmax(axis=1) == y_true)))
  if report:
    report_dir = report_dir or os.path.join(where, f"eval_{split}")
    results["report"] = _report(report_dir, results, params, examples, labels, y_true,
                                probabilities, group_by, groups)
    results["report_dir"] = report_dir
  return results


def _load(model_dir: Optional[str], split: str, params: Optional[Params],
          saved_model: Optional[str], checkpoint: str):
  """(predict, params, labels, results so far, where) of the model evaluate() was asked for."""
  if saved_model:
    predict, params, labels = load_saved_model(saved_model, params)
    results = {"saved_model": saved_model, "engine": "saved_model", "split": split,
               "checkpoint": None, "steps": None}
    return predict, params, labels, results, saved_model
  engine = model_dir_lib.read_params(model_dir).engine  # First: is it a model_dir at all?
  # Once: training may add or keep another meanwhile.
  chosen = model_dir_lib.choose_checkpoint(model_dir, checkpoint)
  model, params, labels = model_dir_lib.load_model(model_dir, params, chosen.path)
  results = {"model_dir": model_dir, "engine": engine, "split": split, **chosen.record()}
  return models.predict_fn(model), params, labels, results, model_dir


def _report(report_dir: str, results: dict, params: Params, examples, labels, y_true,
            probabilities, group_by: Optional[str], groups) -> dict:
  """report.write of one evaluation, its rows matched to the files that were decoded."""
  kept = _decoded(params, examples, len(y_true))
  files = report_lib.files_of(examples, len(y_true), kept)
  if groups is not None:
    groups = report_lib.of_delivered(groups, len(y_true), kept)
  title = f"{results['split']} split" + (
      f", step {results['steps']}" if results["steps"] is not None else "")
  return report_lib.write(report_dir, labels, y_true, probabilities, files,
                          title=f"{title}: accuracy {results['accuracy']:.3f}",
                          step=results["steps"] or 0, group_by=group_by, groups=groups)


def model_ids(model_labels: Sequence[str], data_labels: Sequence[str], where: str) -> np.ndarray:
  """Each of the data's label ids as the id of the model's label of the same name.

  Raises:
    model_dir.ModelDirError: the data has labels the model does not know, naming them.
  """
  foreign = [label for label in data_labels if label not in model_labels]
  if foreign:
    raise model_dir_lib.ModelDirError(
        f"the model in {where!r} does not know the data's labels {foreign} (it knows "
        f"{list(model_labels)})")
  return np.array([list(model_labels).index(label) for label in data_labels], np.int32)


def load_saved_model(path: str, params: Optional[Params] = None
                     ) -> tuple[Callable[[np.ndarray], np.ndarray], Params, list[str]]:
  """An exported SavedModel (audioclf export) as (predict, params, labels).

  Its params come from `params`, else the params.json export writes beside it;
  its labels from its own `label_names` output.

  Raises:
    model_dir.ModelDirError: no params to read the data with, or a clip length
      other than the SavedModel's.
  """
  if params is None:
    params = model_dir_lib.read_params(path)
  serve = tf.saved_model.load(path).signatures["serving_default"]
  samples = serve.structured_input_signature[1]["waveform"].shape[-1]
  if samples != params.clip_samples:
    raise model_dir_lib.ModelDirError(
        f"the SavedModel {path!r} takes {samples} samples, the params give "
        f"{params.clip_samples} (sample_rate={params.sample_rate}, clip_seconds={params.clip_seconds})")
  names = serve(waveform=tf.zeros([1, samples]))["label_names"][0].numpy()
  labels = [name.decode() for name in names]

  def predict(waveforms: np.ndarray) -> np.ndarray:
    return serve(waveform=tf.constant(waveforms, tf.float32))["probabilities"].numpy()

  return predict, params, labels


def _decoded(params: Params, examples, delivered: int) -> Optional[np.ndarray]:
  """Which files of the split decoded (bool per file), when some were skipped as bad.

  The cache's split records a zero length for a skipped file; the evaluation
  pass has just written it.
  """
  if delivered == len(examples):
    return None
  store = store_lib.Store.for_params(params)
  files = [e for e in examples if not e.virtual]  # The cache's rows; _silence_ clips follow.
  split = store.open(store.split_base(store.fingerprints.of(files)), len(files),
                     check_bytes=False)
  if split is None:
    return None
  return np.concatenate([split.lengths > 0, np.ones(len(examples) - len(files), bool)])
