"""tune(): runs or resumes a search, then writes best.flags and best_model/ (see audioclf.tuning)."""

from __future__ import annotations

import contextlib
import gc
import json
import logging as std_logging
import os
import shutil
import time
from typing import Any

import keras_tuner as kt
import tensorflow as tf
from absl import logging

from audioclf import params as params_lib
from audioclf.compat import keras
from audioclf.data import manifest as manifest_lib
from audioclf.data import pipeline
from audioclf.data.manifest import Manifest
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import ParamError, Params
from audioclf.tuning.hypermodel import AudioHyperModel
from audioclf.tuning.trials import OBJECTIVE, hp_values, ranked, read_trials, trials_table
from audioclf.tuning.tuners import make_tuner

BEST_FLAGS = "best.flags"
BEST_MODEL = "best_model"
TENSORBOARD = "tb"


def tune(params: Params, verbose: int = 1) -> dict[str, Any]:
  """Runs (or resumes) the hyperparameter search `params` describe.

  Args:
    params: the base parameters: data, features and the rest as for training;
      tuner, max_trials, trial_steps, trial_epochs and tune_dir set the search.
    verbose: 0 is quiet; 1 prints keras-tuner's trial reports, a line per
      epoch and the table of trials at the end.

  Returns:
    The summary that `python -m audioclf tune` prints last: best_val_accuracy,
    best_trial, best_hyperparameters, trials (in the project), completed,
    trials_run and decoded (by this call), wall_seconds and the paths
    tune_dir, best_flags, best_model and tensorboard.

  Raises:
    params.ParamError: invalid params (an unknown tuner or model among them),
      or neither tune_dir nor model_dir set.
    manifest.DataError: the data source is unusable.
    RuntimeError: no trial completed (keras-tuner's error after three failed
      trials in a row names the cause).
  """
  params.validate()
  if params.embedding_views:
    # keras-tuner saves and restores the model its trials fit: a head view's weights alone.
    logging.warning("audioclf: --embedding_views=%d: tune trains its trials from audio",
                    params.embedding_views)
  tune_dir = _tune_dir(params)
  start = time.perf_counter()
  decoded = pipeline.PROCESS.decodes.count
  manifest = manifest_lib.load(params)
  _fill_cache(params, manifest)
  with _collections_skip_what_is_there():
    hypermodel = AudioHyperModel(params, manifest)
    tuner = make_tuner(params, hypermodel, tune_dir)
    _search(tuner, tune_dir, verbose)
    trials = read_trials(tune_dir)
    completed = _completed_trials(tuner, tune_dir)
    best = completed[0]
    best_params = hypermodel.trial_params(best.hyperparameters)
    best_flags = _write_best_flags(best_params, best, params.tuner, len(trials), tune_dir)
    best_model = save_best_model(tuner, best, best_params, manifest,
                                 os.path.join(tune_dir, BEST_MODEL))
  if verbose:
    print(trials_table(trials, best.trial_id), flush=True)
  return {
      "tuner": params.tuner,
      "best_val_accuracy": float(best.score),
      "best_trial": best.trial_id,
      "best_hyperparameters": hp_values(best),
      "trials": len(trials),
      "completed": len(completed),
      "trials_run": tuner.trials_run,
      "decoded": pipeline.PROCESS.decodes.count - decoded,
      "wall_seconds": round(time.perf_counter() - start, 1),
      "tune_dir": tune_dir,
      "best_flags": best_flags,
      "best_model": best_model,
      "tensorboard": os.path.join(tune_dir, TENSORBOARD),
  }


def _tune_dir(params: Params) -> str:
  """Where the search is kept: --tune_dir, else <model_dir>/tune."""
  tune_dir = params.tune_dir or (params.model_dir and os.path.join(params.model_dir, "tune"))
  if not tune_dir:
    raise ParamError("--tune_dir: must be set, or --model_dir (for <model_dir>/tune): "
                     "the search is kept there")
  return tune_dir


@contextlib.contextmanager
def _collections_skip_what_is_there():
  """Leaves the objects the process holds before the search out of its garbage collections.

  Each trial collects garbage a few times (keras-tuner before each build,
  Keras 3's clear_session, the trial's clean-up in tuners), and a collection
  walks every object the process tracks, TensorFlow's and Keras' included:
  much of a short trial's CPU. Frozen (gc.freeze), those stay
  out of it; the trials' own objects are collected as before, and unfrozen
  after the search, the older ones too. A process that froze its objects
  already (a server that forks) keeps its own arrangement.
  """
  if gc.get_freeze_count():
    yield
    return
  gc.freeze()
  try:
    yield
  finally:
    gc.unfreeze()


def _fill_cache(params: Params, manifest: Manifest) -> None:
  """Decodes every file into the cache before the first trial.

  A trial shorter than an epoch would fill the cache only in part and leave
  the rest for later trials to decode.
  """
  filled = pipeline.fill_cache(params, manifest)
  if filled:
    logging.info("audioclf: decoded %d files into the cache before the first trial", filled)


def _completed_trials(tuner: kt.Tuner, tune_dir: str) -> list[kt.engine.trial.Trial]:
  """The search's completed trials, best first; raises RuntimeError where none completed."""
  completed = ranked(tuner.oracle.trials.values())
  if not completed:
    raise RuntimeError(f"no trial of {tune_dir} completed; see their messages in "
                       f"{tuner.project_dir}/trial_*/trial.json")
  return completed


def _search(tuner: kt.Tuner, tune_dir: str, verbose: int) -> None:
  """tuner.search, each trial's TensorBoard logs under tb/, without TF's retracing warnings."""
  # keras-tuner points a copy of this callback at tb/<trial id>/execution0 for
  # each trial, and adds the HParams summary of the trial's values.
  board = keras.callbacks.TensorBoard(os.path.join(tune_dir, TENSORBOARD), write_graph=False)
  # Each trial traces a new model's functions, by design; TensorFlow's warning
  # about frequent retracing would repeat after every trial and say nothing.
  quiet = _DropRetracingWarnings()
  tf.get_logger().addFilter(quiet)
  try:
    tuner.search(callbacks=[board], verbose=2 if verbose else 0)
  finally:
    tf.get_logger().removeFilter(quiet)


def _write_best_flags(best_params: Params, best, tuner_name: str, trials: int,
                      tune_dir: str) -> str:
  """best.flags: the best trial's Params as a flagfile, its header saying how to train it again."""
  best_flags = os.path.join(tune_dir, BEST_FLAGS)
  params_lib.to_flagfile(best_params, best_flags, header=(
      f"Best of {trials} trials of the {tuner_name} search in {tune_dir}: "
      f"{OBJECTIVE}={best.score:.4f} (trial {best.trial_id}).\n"
      f"Train it again (add --train_steps=N to train longer):\n"
      f"  python -m audioclf train --flagfile={best_flags} --model_dir=<new folder>"))
  return best_flags


def save_best_model(tuner: kt.Tuner, trial: kt.engine.trial.Trial, params: Params,
                    manifest: Manifest, path: str) -> str:
  """Writes the best trial's model, as of its best epoch, as a model_dir at `path`.

  No training: keras-tuner kept that epoch's weights. The folder is what
  `audioclf train` leaves (labels.txt, params.json, metrics.json, an
  object-based checkpoint rooted at the model), so `model_dir.load_model`,
  evaluate and export read it as they read a trained model.

  Returns:
    `path`.
  """
  params = params.replace(model_dir=path)
  if _holds_trial(path, trial, params):
    return path  # A rerun with the same best: keep it, and anything exported from it.
  # With the optimizer's slots and step (AudioHyperModel.build makes them), so
  # train can continue from this model_dir.
  model = tuner.load_model(trial)
  # A rerun whose best trial changed replaces the folder: never two models in one.
  shutil.rmtree(path, ignore_errors=True)
  model_dir_lib.prepare(params, manifest.labels)
  step = int(model.optimizer.iterations.numpy())
  model_dir_lib.checkpoint_manager(tf.train.Checkpoint(model), path, max_to_keep=1).save(
      checkpoint_number=step)
  model_dir_lib.write_metrics(path, {
      "source": "audioclf.tune", "trial": trial.trial_id, "steps": step,
      OBJECTIVE: float(trial.score), "model_dir": path})
  return path


def _holds_trial(path: str, trial: kt.engine.trial.Trial, params: Params) -> bool:
  try:
    with open(os.path.join(path, model_dir_lib.METRICS_FILE)) as f:
      saved_trial = json.load(f).get("trial")
    # Wherever the folders are now: a moved tune_dir still holds the same model.
    saved = model_dir_lib.read_params(path).replace(model_dir=params.model_dir,
                                                    tune_dir=params.tune_dir)
    return (saved_trial == trial.trial_id and saved == params
            and model_dir_lib.own_latest_checkpoint(path) is not None)
  except (OSError, ValueError, model_dir_lib.ModelDirError):
    return False


class _DropRetracingWarnings(std_logging.Filter):

  def filter(self, record: std_logging.LogRecord) -> bool:
    return "triggered tf.function retracing" not in record.getMessage()
