"""Hyperparameter search with keras-tuner over training's own model builder and warm input_fn.

  python -m audioclf.tune --flagfile=flags/tune.flags
  audioclf.tune(params)                                   # the same from Python

Each trial builds its model with `models.build_model`/`compile_model`, reads
`pipeline.input_fn` and trains in the Keras engine's loop
(`engines.keras_loop.fit`: stall meter, step clock, stop at the trial's
train_steps), exactly as `python -m audioclf.train` does, with the trial's
hyperparameters put into `params`; each trial's record (the table, its
audioclf_trial.json) has its examples/s and input stall. The clips are
decoded into the persistent cache once, before the first trial; no trial
decodes audio, since the cache key depends on the sample rate and the files,
not on the batch size or the model.

What a search leaves in --tune_dir (a rerun with the same folder resumes it:
finished trials are kept, an interrupted one is run again, and a larger
--max_trials extends the search):

  search/               keras-tuner's project: oracle state, trial_<id>/ with
                        trial.json, the best epoch's weights, audioclf_trial.json
  tb/<trial id>/        TensorBoard logs of each trial, with the HParams dashboard
  best.flags            the best trial's Params as a flagfile for audioclf.train
  best_model/           the best trial's model as a model_dir (labels.txt,
                        params.json, metrics.json, checkpoint): audioclf.evaluate
                        and audioclf.export read it as they read a trained one
"""

from __future__ import annotations

import gc
import glob
import json
import logging as std_logging
import os
import shutil
import sys
import time
from typing import Any, Optional, Sequence

import keras_tuner as kt
import psutil
import tensorflow as tf
from absl import app, logging

import audioclf
from audioclf import cache, cli, compat, models, pipeline
from audioclf import manifest as manifest_lib
from audioclf import model_dir as model_dir_lib
from audioclf.clock import StepClock, training_clock
from audioclf.engines import common as engines_common
from audioclf.engines import keras_loop
from audioclf.compat import keras
from audioclf.manifest import Manifest
from audioclf.params import ParamError, Params
from audioclf.stall import StallMeter

OBJECTIVE = "val_accuracy"  # compile_model's "accuracy", on input_fn(params, "eval").
PROJECT = "search"  # keras-tuner's project folder under tune_dir.
HYPERBAND_FACTOR = 3  # keras-tuner's default: each round keeps the best third.
TRIAL_RECORD = "audioclf_trial.json"  # Per trial, next to keras-tuner's trial.json.
BEST_FLAGS = "best.flags"
BEST_MODEL = "best_model"
TENSORBOARD = "tb"


class AudioHyperModel(kt.HyperModel):
  """The search space: audioclf's model builder and input_fn, with the hyperparameters in Params.

  Searched, around the base `params` (whose values are the defaults):

    model          every entry of `models.MODELS`
    width          half, once or twice --width
    batch_size     half, once or twice --batch_size
    learning_rate  --learning_rate / 10 to * 10, log-uniform
    dropout        0.0, 0.1, ... 0.5 (and --dropout)
    optimizer      adam, rmsprop, sgd

  So --width and --batch_size set the scale, and with it the cost, of the
  trials. A trial trains trial_steps (its train_steps), evaluating after each
  of trial_epochs epochs; everything else comes from `params` unchanged, so a
  trial is the training run its Params describe.
  """

  def __init__(self, params: Params, manifest: Manifest):
    super().__init__(name="audioclf")
    self.params = params
    self.manifest = manifest
    # The last fit's stall meter, step clock and batch size: what its trial's record reports.
    self.last_fit: Optional[tuple[StallMeter, StepClock, int]] = None

  def trial_params(self, hp: kt.HyperParameters) -> Params:
    """The base params with `hp`'s values; declares the hyperparameters on first use."""
    p = self.params
    return p.replace(
        # A trial is a whole training run of trial_steps, evaluated after each
        # epoch: a learning-rate schedule ends within it, and best.flags
        # describes the very run that the best trial was.
        train_steps=steps_per_epoch(p) * p.trial_epochs,
        eval_every_steps=steps_per_epoch(p),
        model=hp.Choice("model", sorted(models.MODELS), default=p.model),
        width=hp.Choice("width", _around(p.width), default=p.width),
        batch_size=hp.Choice("batch_size", _around(p.batch_size), default=p.batch_size),
        learning_rate=hp.Float("learning_rate", p.learning_rate / 10, p.learning_rate * 10,
                               sampling="log", default=p.learning_rate),
        dropout=hp.Choice("dropout", sorted({0.0, 0.1, 0.2, 0.3, 0.4, 0.5, p.dropout}),
                          default=p.dropout),
        optimizer=hp.Choice("optimizer", sorted({"adam", "rmsprop", "sgd", p.optimizer}),
                            default=p.optimizer),
    )

  def build(self, hp: kt.HyperParameters) -> keras.Model:
    # Drop the previous trial's Keras graph, model and layer-name counters
    # before building the next one. (Its traced train step is let go of
    # separately, after the trial: see compat.forget_trial_gradients.)
    keras.backend.clear_session()
    gc.collect()
    params = self.trial_params(hp)
    # Every trial starts from the same seed, so trials differ by their
    # hyperparameters, not by their luck at initialisation.
    keras.utils.set_random_seed(params.seed)
    model = models.compile_model(models.build_model(params, len(self.manifest.labels)), params)
    # The optimizer's slots, made now rather than by the first step: a trial's
    # weights file holds them, and Keras 3 skips restoring an optimizer that
    # has none yet (tuner.load_model, in save_best_model), step count included.
    model.optimizer.build(model.trainable_variables)
    return model

  def fit(self, hp: kt.HyperParameters, model: keras.Model,
          callbacks: Optional[Sequence[keras.callbacks.Callback]] = None,
          epochs: Optional[int] = None, initial_epoch: int = 0, verbose: int = 2,
          **kwargs: Any) -> keras.callbacks.History:
    """Trains `model` on the trial's input_fn: `trial_epochs` epochs of trial_steps in all.

    The datasets are made here, not once for the search: the batch size is a
    property of the dataset, and it is one of the hyperparameters. Hyperband
    passes `epochs` and `initial_epoch` (its rung); the other tuners pass neither.
    """
    del kwargs  # Nothing else is passed: search() is only called by tune().
    params = self.trial_params(hp)
    steps = steps_per_epoch(params)
    callbacks = list(callbacks or [])
    meter, clock = StallMeter(), training_clock(steps_to_run=params.train_steps)
    self.last_fit = (meter, clock, params.batch_size)
    # The trial's input stall goes beside keras-tuner's TensorBoard logs of it.
    boards = [c for c in callbacks if isinstance(c, keras.callbacks.TensorBoard)]
    # A Hyperband trial that continues its parent's model continues its
    # parent's data too, as a resumed training run does, instead of
    # replaying the batches the parent has already trained on.
    train = engines_common.metered_train_input(params, self.manifest, meter,
                                               seed_offset=initial_epoch * steps)
    return keras_loop.fit(
        model,
        train,
        steps_per_epoch=steps,
        epochs=epochs or params.trial_epochs,
        initial_epoch=initial_epoch,
        meter=meter,
        clocks=[clock],
        train_steps=params.train_steps,
        # A point an epoch, beside keras-tuner's epoch summaries.
        stall_log_dir=os.path.join(boards[0].log_dir, "train") if boards else None,
        stall_log_every=steps,
        validation_data=pipeline.input_fn(params, "eval", manifest=self.manifest),
        callbacks=callbacks,
        verbose=verbose)


def _around(value: int) -> list[int]:
  return sorted({max(1, value // 2), value, 2 * value})


def steps_per_epoch(params: Params) -> int:
  return max(1, params.trial_steps // params.trial_epochs)


class _TrialHooks:
  """Mixed into keras-tuner's tuners: after each trial, free its graphs and record it.

  The record (files decoded, seconds, RSS) is written as audioclf_trial.json
  in the trial's folder, so the table of a resumed search shows it for trials
  that an earlier process ran.
  """

  def __init__(self, *args, **kwargs):
    self.trials_run = 0
    self._begin = (0.0, 0, set())
    super().__init__(*args, **kwargs)

  def on_trial_begin(self, trial):
    self._begin = (time.perf_counter(), cache.decode_count(), compat.trial_gradient_names())
    self.hypermodel.last_fit = None
    super().on_trial_begin(trial)

  def on_trial_end(self, trial):
    start, decoded, gradients = self._begin
    compat.forget_trial_gradients(keep=gradients)
    gc.collect()
    record = {"decoded": cache.decode_count() - decoded,
              "seconds": round(time.perf_counter() - start, 2),
              "rss_mb": round(_rss_mb(), 1), **_fit_record(self.hypermodel)}
    with open(os.path.join(self.get_trial_dir(trial.trial_id), TRIAL_RECORD), "w") as f:
      json.dump(record, f)
    logging.info("audioclf: trial %s %s in %.1f s: decoded %d files, RSS %.0f MB",
                 trial.trial_id, trial.status, record["seconds"], record["decoded"],
                 record["rss_mb"])
    self.trials_run += 1
    super().on_trial_end(trial)


def _fit_record(hypermodel: AudioHyperModel) -> dict[str, Any]:
  """The trial's training throughput and input stall, as the engines report them in metrics.json."""
  if hypermodel.last_fit is None:
    return {}  # The trial failed before it trained.
  meter, clock, batch_size = hypermodel.last_fit
  rate = clock.examples_per_sec(batch_size)
  return {"examples_per_sec": None if rate is None else round(rate, 1),
          "input_stall": engines_common.stall_fraction(meter)}


class _RandomSearch(_TrialHooks, kt.RandomSearch):
  pass


class _Hyperband(_TrialHooks, kt.Hyperband):
  pass


class _BayesianOptimization(_TrialHooks, kt.BayesianOptimization):
  pass


def make_tuner(params: Params, hypermodel: AudioHyperModel, tune_dir: str) -> kt.Tuner:
  """The keras-tuner tuner `params.tuner` names, reloading `tune_dir`'s project if there is one.

  Raises:
    params.ParamError: an unknown tuner or model, or a trial budget that is not positive.
  """
  params.validate()
  # keras-tuner takes a seed of 0 for "none" and would draw one at random.
  common = dict(hypermodel=hypermodel, objective=kt.Objective(OBJECTIVE, "max"),
                seed=params.seed + 1, directory=tune_dir, project_name=PROJECT, overwrite=False)
  device = engines_common.prefetch_device(params)
  if device:
    # Trials build and fit under it, as the Keras engine does: batches are
    # copied to the device while the step before them runs.
    common["distribution_strategy"] = tf.distribute.OneDeviceStrategy(device)
  if params.tuner == "hyperband":
    return _Hyperband(max_epochs=params.trial_epochs, factor=HYPERBAND_FACTOR,
                      hyperband_iterations=hyperband_iterations(params), **common)
  if params.tuner == "bayesian":
    # keras-tuner's default starts with 3 random trials per hyperparameter
    # (18 here), so a search of fewer trials would never use its model; let a
    # third of the trials explore, and the Gaussian process pick the rest.
    return _BayesianOptimization(max_trials=params.max_trials,
                                 num_initial_points=max(2, params.max_trials // 3), **common)
  return _RandomSearch(max_trials=params.max_trials, **common)


def hyperband_iterations(params: Params) -> int:
  """Hyperband sweeps that fit a budget of max_trials full (trial_epochs-long) trials.

  One sweep runs every bracket once; its cost in epochs comes from keras-tuner's
  own schedule, where a promoted trial continues from its parent's epoch.
  """
  oracle = kt.oracles.HyperbandOracle(kt.Objective(OBJECTIVE, "max"),
                                      max_epochs=params.trial_epochs, factor=HYPERBAND_FACTOR)
  # pylint: disable=protected-access
  epochs = 0
  for bracket in range(oracle._get_num_brackets()):
    for rnd in range(oracle._get_num_rounds(bracket)):
      previous = oracle._get_epochs(bracket, rnd - 1) if rnd else 0
      epochs += oracle._get_size(bracket, rnd) * (oracle._get_epochs(bracket, rnd) - previous)
  # pylint: enable=protected-access
  return max(1, round(params.max_trials * params.trial_epochs / epochs))


def tune(params: Params, verbose: int = 1) -> dict[str, Any]:
  """Runs (or resumes) the hyperparameter search `params` describe.

  Args:
    params: the base parameters: data, features and the rest as for training;
      tuner, max_trials, trial_steps, trial_epochs and tune_dir set the search.
    verbose: 0 is quiet; 1 prints keras-tuner's trial reports, a line per
      epoch and the table of trials at the end.

  Returns:
    The summary that `python -m audioclf.tune` prints last: best_val_accuracy,
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
  tune_dir = params.tune_dir or (params.model_dir and os.path.join(params.model_dir, "tune"))
  if not tune_dir:
    raise ParamError("--tune_dir: must be set, or --model_dir (for <model_dir>/tune): "
                     "the search is kept there")
  start = time.perf_counter()
  decoded = cache.decode_count()
  manifest = manifest_lib.load(params)
  # Before the first trial: one shorter than an epoch would fill the cache only
  # in part and leave the rest for later trials to decode.
  filled = pipeline.fill_cache(params, manifest)
  if filled:
    logging.info("audioclf: decoded %d files into the cache before the first trial", filled)

  hypermodel = AudioHyperModel(params, manifest)
  tuner = make_tuner(params, hypermodel, tune_dir)
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

  trials = read_trials(tune_dir)
  completed = _ranked(tuner.oracle.trials.values())
  if not completed:
    raise RuntimeError(f"no trial of {tune_dir} completed; see their messages in "
                       f"{tuner.project_dir}/trial_*/trial.json")
  best = completed[0]
  best_params = hypermodel.trial_params(best.hyperparameters)
  best_flags = os.path.join(tune_dir, BEST_FLAGS)
  cli.to_flagfile(best_params, best_flags, header=(
      f"Best of {len(trials)} trials of the {params.tuner} search in {tune_dir}: "
      f"{OBJECTIVE}={best.score:.4f} (trial {best.trial_id}).\n"
      f"Train it again (add --train_steps=N to train longer):\n"
      f"  python -m audioclf.train --flagfile={best_flags} --model_dir=<new folder>"))
  best_model = save_best_model(tuner, best, best_params, manifest,
                               os.path.join(tune_dir, BEST_MODEL))
  if verbose:
    print(trials_table(trials, best.trial_id), flush=True)
  return {
      "tuner": params.tuner,
      "best_val_accuracy": float(best.score),
      "best_trial": best.trial_id,
      "best_hyperparameters": _hp_values(best),
      "trials": len(trials),
      "completed": len(completed),
      "trials_run": tuner.trials_run,
      "decoded": cache.decode_count() - decoded,
      "wall_seconds": round(time.perf_counter() - start, 1),
      "tune_dir": tune_dir,
      "best_flags": best_flags,
      "best_model": best_model,
      "tensorboard": os.path.join(tune_dir, TENSORBOARD),
  }


def save_best_model(tuner: kt.Tuner, trial: kt.engine.trial.Trial, params: Params,
                    manifest: Manifest, path: str) -> str:
  """Writes the best trial's model, as of its best epoch, as a model_dir at `path`.

  No training: keras-tuner kept that epoch's weights. The folder is what
  `audioclf.train` leaves (labels.txt, params.json, metrics.json, an
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
            and tf.train.latest_checkpoint(path) is not None)
  except (OSError, ValueError, model_dir_lib.ModelDirError):
    return False


def read_trials(tune_dir: str) -> list[dict[str, Any]]:
  """The trials of tune_dir's search so far, in order: id, status, score, values and record.

  Read from the files keras-tuner and this module write, so it needs no
  tuner and works on a search another process is running.
  """
  rows = []
  for path in glob.glob(os.path.join(tune_dir, PROJECT, "trial_*", "trial.json")):
    trial = kt.engine.trial.Trial.load(path)
    record = {}
    record_path = os.path.join(os.path.dirname(path), TRIAL_RECORD)
    if os.path.isfile(record_path):
      with open(record_path) as f:
        record = json.load(f)
    rows.append({"trial": trial.trial_id, "status": trial.status, OBJECTIVE: trial.score,
                 "epochs": trial.hyperparameters.values.get("tuner/epochs"),
                 **_hp_values(trial), **record})
  # Ids are numbers padded to the digits of max_trials, which a larger rerun may change.
  return sorted(rows, key=lambda row: int(row["trial"]))


def trials_table(rows: Sequence[dict[str, Any]], best: Optional[str] = None) -> str:
  """Plain-text table of `read_trials`' rows, the best trial marked with `*`."""
  columns = ["trial", "status", OBJECTIVE, "model", "width", "dropout", "learning_rate",
             "optimizer", "batch_size", "epochs", "decoded", "seconds", "examples_per_sec",
             "input_stall"]
  if all(row.get("epochs") is None for row in rows):
    columns.remove("epochs")  # Only Hyperband trains trials for different epochs.

  def cell(row, column):
    value = row.get(column)
    if column == "trial":
      return f"{value}{'*' if value == best else ''}"
    if value is None:
      return "-"
    if column == "learning_rate":
      return f"{value:.2e}"
    if isinstance(value, float):
      return f"{value:.4f}" if column == OBJECTIVE else f"{value:g}"
    return str(value)

  cells = [[cell(row, c) for c in columns] for row in rows]
  widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
  lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
  lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
  return "\n".join(line.rstrip() for line in lines)


class _DropRetracingWarnings(std_logging.Filter):

  def filter(self, record: std_logging.LogRecord) -> bool:
    return "triggered tf.function retracing" not in record.getMessage()


def _ranked(trials) -> list:
  """Completed trials, best first; ties go to the lower validation loss, then the earlier trial.

  A small validation split often gives several trials the same accuracy;
  keras-tuner would then pick one by the order it happened to load them in.
  """
  def key(trial):
    loss = (trial.metrics.get_best_value("val_loss") if trial.metrics.exists("val_loss")
            else float("inf"))
    return (-trial.score, loss, int(trial.trial_id))

  return sorted((t for t in trials if t.status == "COMPLETED" and t.score is not None), key=key)


def _hp_values(trial: kt.engine.trial.Trial) -> dict[str, Any]:
  # keras-tuner's own entries (tuner/epochs, tuner/trial_id, ...) are Hyperband's bookkeeping.
  return {k: v for k, v in trial.hyperparameters.values.items() if not k.startswith("tuner/")}


def _rss_mb() -> float:
  return psutil.Process().memory_info().rss / 2**20


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  summary = tune(cli.params_from_flags())
  print(model_dir_lib.summary_line(summary), flush=True)


def run() -> None:
  cli.define_flags()
  cli.run(main)


sys.modules[__name__].__class__ = audioclf.CommandModule  # See CommandModule.

if __name__ == "__main__":
  run()
