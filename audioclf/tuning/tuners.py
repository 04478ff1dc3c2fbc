"""keras-tuner's tuners, with audioclf's clean-up after each trial and a record of it."""

from __future__ import annotations

import gc
import json
import os
import time
from typing import Any

import keras_tuner as kt
import psutil
import tensorflow as tf
from absl import logging

from audioclf import compat, files
from audioclf.compat import private
from audioclf.data import pipeline
from audioclf.engines import common as engines_common
from audioclf.params import TUNERS, Params
from audioclf.tuning.hypermodel import AudioHyperModel
from audioclf.tuning.trials import OBJECTIVE, PROJECT, TRIAL_RECORD

HYPERBAND_FACTOR = 3  # keras-tuner's default: each round keeps the best third.


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
    self._begin = (time.perf_counter(), pipeline.PROCESS.decodes.count,
                   compat.trial_gradient_names())
    self.hypermodel.last_fit = None
    super().on_trial_begin(trial)

  def on_trial_end(self, trial):
    start, decoded, gradients = self._begin
    compat.forget_trial_gradients(keep=gradients)
    gc.collect()
    record = {"decoded": pipeline.PROCESS.decodes.count - decoded,
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


def make_tuner(params: Params, hypermodel: AudioHyperModel, tune_dir: str) -> kt.Tuner:
  """The keras-tuner tuner `params.tuner` names, reloading `tune_dir`'s project if there is one.

  Raises:
    params.ParamError: an unknown tuner or model, or a trial budget that is not positive.
  """
  params.validate()
  private.write_search_state_with(files.atomic_write)  # A search killed at any point resumes.
  # keras-tuner takes a seed of 0 for "none" and would draw one at random.
  common = dict(hypermodel=hypermodel, objective=kt.Objective(OBJECTIVE, "max"),
                seed=params.seed + 1, directory=tune_dir, project_name=PROJECT, overwrite=False)
  device = engines_common.prefetch_device(params)
  if device:
    # Trials build and fit under it, as the Keras engine does: batches are
    # copied to the device while the step before them runs.
    common["distribution_strategy"] = tf.distribute.OneDeviceStrategy(device)
  if params.tuner == "hyperband":
    common.update(max_epochs=params.trial_epochs, factor=HYPERBAND_FACTOR,
                  hyperband_iterations=hyperband_iterations(params))
  elif params.tuner == "bayesian":
    # keras-tuner's default starts with 3 random trials per hyperparameter
    # (18 here), so a search of fewer trials would never use its model; let a
    # third of the trials explore, and the Gaussian process pick the rest.
    common.update(max_trials=params.max_trials, num_initial_points=max(2, params.max_trials // 3))
  else:
    common.update(max_trials=params.max_trials)
  base = getattr(kt, TUNERS[params.tuner])
  # keras-tuner's tuner with audioclf's per-trial hooks mixed in.
  return type(base.__name__, (_TrialHooks, base), {})(**common)


def hyperband_iterations(params: Params) -> int:
  """Hyperband sweeps that fit a budget of max_trials full (trial_epochs-long) trials.

  One sweep runs every bracket once; its cost in epochs comes from keras-tuner's
  own schedule, where a promoted trial continues from its parent's epoch.
  """
  oracle = kt.oracles.HyperbandOracle(kt.Objective(OBJECTIVE, "max"),
                                      max_epochs=params.trial_epochs, factor=HYPERBAND_FACTOR)
  epochs = sum(trials * (until - before)
               for trials, until, before in private.hyperband_schedule(oracle))
  return max(1, round(params.max_trials * params.trial_epochs / epochs))


def _rss_mb() -> float:
  return psutil.Process().memory_info().rss / 2**20
