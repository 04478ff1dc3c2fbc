"""The best checkpoint of a run: <model_dir>/best/, its record, and when to stop for want of better.

Both engines feed a `Tracker` each validation evaluation with the checkpoint
it evaluated (the Keras engine at each epoch's end, the Estimator from an
exporter); a better value copies that checkpoint into best/. The record,
best/best.json, holds every evaluation's value, so a resumed run knows the
best so far and how many evaluations have passed without a better one:
early stopping counts from it, and ends the run where the engines stop it.

  {"metric": "val_accuracy", "value": 0.97, "tiebreak": 0.11, "step": 400,
   "checkpoint": "model.ckpt-400",
   "evaluations": [{"step": 200, "value": 0.91, "tiebreak": 0.32},
                   {"step": 400, "value": 0.97, "tiebreak": 0.11}, ...]}
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import tensorflow as tf
from absl import logging

from audioclf import files
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import Params

# A lower loss is better; a higher anything else.
LOWER_IS_BETTER = ("val_loss",)
# Where two evaluations tie on the metric, the other one decides: on a small validation split
# accuracy often stays equal over many evaluations, and the later checkpoints of such a plateau
# usually have the lower loss (and do better on data the run never saw).
TIEBREAK = {"val_accuracy": "val_loss", "val_loss": "val_accuracy"}


class Tracker:
  """The best value of one validation metric so far, kept with its checkpoint in <model_dir>/best/.

  Every task of a cluster may hold one (each sees the same evaluations, so
  all decide to stop together); only the one with `write` copies and records.
  """

  def __init__(self, model_dir: str, metric: str, patience: int = 0, write: bool = True):
    """Reads the record a previous run of this model_dir left, if any.

    Raises:
      model_dir.ModelDirError: best/ holds the best by another metric.
    """
    self.metric, self.patience = metric, patience
    self._dir = os.path.join(model_dir, model_dir_lib.BEST_DIR)
    self._write = write
    self.record = model_dir_lib.best_record(model_dir)
    if self.record is not None and self.record["metric"] != metric:
      raise model_dir_lib.ModelDirError(
          f"{self._dir} holds the best checkpoint by {self.record['metric']}, and this run keeps "
          f"it by {metric}: rerun with --keep_best={self.record['metric']}, or remove {self._dir} "
          "to start a new record")

  def better(self, value: float, tiebreak: Optional[float] = None) -> bool:
    """Whether `value` beats the best so far; on a tie, whether `tiebreak` (TIEBREAK's) does.

    Where either tiebreak is unknown (a record of an earlier release), a tie
    keeps the earlier checkpoint.
    """
    if self.record is None:
      return True
    if value != self.record["value"]:
      return _higher(self.metric, value, self.record["value"])
    best = self.record.get("tiebreak")
    return (tiebreak is not None and best is not None
            and _higher(TIEBREAK[self.metric], tiebreak, best))

  @property
  def waited(self) -> int:
    """Evaluations since the best one."""
    if self.record is None:
      return 0
    return sum(e["step"] > self.record["step"] for e in self.record["evaluations"])

  @property
  def exhausted(self) -> bool:
    """Whether early stopping's patience has run out: `patience` evaluations without a better."""
    return bool(self.patience) and self.waited >= self.patience

  def update(self, step: int, results: dict[str, float], checkpoint: Optional[str]) -> bool:
    """Takes one evaluation: keeps its checkpoint if its value is the best so far.

    Args:
      step: the global step evaluated.
      results: the evaluation's metrics, "accuracy" and "loss" (no "val_").
      checkpoint: the prefix of the checkpoint evaluated (None where this
        task writes nothing).

    Returns:
      Whether it was the best so far.
    """
    value = float(results[self.metric.removeprefix("val_")])
    tiebreak = results.get(TIEBREAK[self.metric].removeprefix("val_"))
    tiebreak = None if tiebreak is None else float(tiebreak)
    improved = self.better(value, tiebreak)
    evaluations = [e for e in (self.record or {}).get("evaluations", []) if e["step"] != step]
    evaluations.append({"step": int(step), "value": value, "tiebreak": tiebreak})
    if improved:
      name = (os.path.basename(checkpoint) if checkpoint
              else f"{model_dir_lib.CHECKPOINT_NAME}-{step}")
      self.record = {"metric": self.metric, "value": value, "tiebreak": tiebreak,
                     "step": int(step), "checkpoint": name}
    self.record["evaluations"] = evaluations
    if self._write and checkpoint:
      self._save(checkpoint if improved else None)
    if improved:
      logging.info("audioclf: step %d has the best %s so far, %.4f: kept in %s", step,
                   self.metric, value, self._dir)
    return improved

  def summary(self) -> Optional[dict[str, Any]]:
    """What metrics.json says of the best: {"metric", "value", "step"}, or None before any."""
    if self.record is None:
      return None
    return {k: self.record[k] for k in ("metric", "value", "step")}

  def _save(self, checkpoint: Optional[str]) -> None:
    """Copies `checkpoint` (if given) into best/, then the record; then drops the older copy.

    In that order: a reader of best.json always finds the files it names.
    best.json names the file relative to best/, so the model_dir can move.
    """
    os.makedirs(self._dir, exist_ok=True)
    if checkpoint is not None:
      for source in tf.io.gfile.glob(f"{checkpoint}.*"):
        tf.io.gfile.copy(source, os.path.join(self._dir, os.path.basename(source)),
                         overwrite=True)
    files.atomic_write(os.path.join(self._dir, model_dir_lib.BEST_FILE),
                       (json.dumps(self.record, indent=1) + "\n").encode("utf-8"))
    keep = f"{self.record['checkpoint']}."
    for path in tf.io.gfile.glob(os.path.join(self._dir, f"{model_dir_lib.CHECKPOINT_NAME}-*")):
      if not os.path.basename(path).startswith(keep):
        tf.io.gfile.remove(path)


def _higher(metric: str, value: float, than: float) -> bool:
  """Whether `value` of `metric` is better than `than`."""
  return value < than if metric in LOWER_IS_BETTER else value > than


def tracker(params: Params, write: bool = True) -> Optional[Tracker]:
  """The run's Tracker where --keep_best is set, else None."""
  if params.keep_best == "none":
    return None
  return Tracker(params.model_dir, params.keep_best, params.early_stopping_patience, write)


def check_resume(params: Params) -> None:
  """Raises ModelDirError if params would resume a model_dir whose best/ they would leave stale.

  A run without --keep_best would train on past the best/ an earlier run
  kept, and evaluate, predict and export would go on taking that one.
  """
  if not params.model_dir:
    return  # model_dir.prepare says what is missing.
  record = model_dir_lib.best_record(params.model_dir)
  if record is not None and params.keep_best == "none":
    where = os.path.join(params.model_dir, model_dir_lib.BEST_DIR)
    raise model_dir_lib.ModelDirError(
        f"{where} holds the best checkpoint by {record['metric']} of an earlier run: resume with "
        f"--keep_best={record['metric']}, or remove {where} to train on without it")
  tracker(params, write=False)  # Refuses another metric.
