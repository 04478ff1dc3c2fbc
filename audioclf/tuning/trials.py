"""The trials of a search so far, read from the files keras-tuner and audioclf write, and their table."""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Optional, Sequence

import keras_tuner as kt

OBJECTIVE = "val_accuracy"  # compile_model's "accuracy", on input_fn(params, "eval").
PROJECT = "search"  # keras-tuner's project folder under tune_dir.
TRIAL_RECORD = "audioclf_trial.json"  # Per trial, next to keras-tuner's trial.json.
MODEL_ARGS = "model_args"  # The name scope of the model's own hyperparameters.


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
                 **hp_values(trial), **record})
  # Ids are numbers padded to the digits of max_trials, which a larger rerun may change.
  return sorted(rows, key=lambda row: int(row["trial"]))


def trials_table(rows: Sequence[dict[str, Any]], best: Optional[str] = None) -> str:
  """Plain-text table of `read_trials`' rows, the best trial marked with `*`."""
  columns = ["trial", "status", OBJECTIVE, MODEL_ARGS, "dropout", "learning_rate",
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
    if column == MODEL_ARGS:
      return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, float):
      return f"{value:.4f}" if column == OBJECTIVE else f"{value:g}"
    return str(value)

  cells = [[cell(row, c) for c in columns] for row in rows]
  widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
  lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
  lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
  return "\n".join(line.rstrip() for line in lines)


def ranked(trials) -> list:
  """Completed trials, best first; ties go to the lower validation loss, then the earlier trial.

  A small validation split often gives several trials the same accuracy;
  keras-tuner would then pick one by the order it happened to load them in.
  """
  def key(trial):
    loss = (trial.metrics.get_best_value("val_loss") if trial.metrics.exists("val_loss")
            else float("inf"))
    return (-trial.score, loss, int(trial.trial_id))

  return sorted((t for t in trials if t.status == "COMPLETED" and t.score is not None), key=key)


def hp_values(trial: kt.engine.trial.Trial) -> dict[str, Any]:
  """A trial's hyperparameters as Params fields: the model's own gathered under model_args."""
  values, args = {}, {}
  for key, value in trial.hyperparameters.values.items():
    if key.startswith(f"{MODEL_ARGS}/"):
      args[key.split("/", 1)[1]] = value
    elif not key.startswith("tuner/"):  # Hyperband's bookkeeping (tuner/epochs, ...).
      values[key] = value
  return {**values, MODEL_ARGS: args} if args else values
