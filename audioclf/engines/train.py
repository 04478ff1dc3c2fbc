"""train(): one training run as `params` describe it, with the engine it names, into model_dir.

`python -m audioclf train` runs it (audioclf.commands.train); `audioclf.train(params)`
is the same from Python.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from absl import logging

from audioclf import engines
from audioclf.data import manifest as manifest_lib
from audioclf.data import pipeline
from audioclf.distributed import cluster as cluster_lib
from audioclf.model import best as best_lib
from audioclf.model import model_dir as model_dir_lib
from audioclf.model import registry
from audioclf.params import Params


def train(params: Params) -> dict[str, Any]:
  """Trains a model as `params` describe and writes its model_dir.

  Leaves labels.txt, params.json, checkpoints, TensorBoard logs and
  metrics.json in params.model_dir; a model_dir with checkpoints of the same
  run is resumed up to params.train_steps.

  Args:
    params: the run's parameters; model_dir must be set.

  Returns:
    The metrics also written to metrics.json: engine, model, steps,
    val_loss/val_accuracy, test_loss/test_accuracy (None without a test split),
    examples_per_sec, input_stall_fraction (the share of training step time
    spent waiting for input; None when no step ran), best ({"metric",
    "value", "step"} of the checkpoint --keep_best kept; None without it),
    stopped_early and stopped_at_step (early stopping's step, else None),
    wall_seconds, all_train_files_read (False where the run ended before
    reading every training file, which were then not all checked; None where
    the cache is read-only and cannot tell), model_dir. The validation and
    test metrics are the final model's; `audioclf evaluate` gives the best one's.

  Raises:
    params.ParamError: an invalid value (an unknown engine or model among them).
    model_dir.ModelDirError: model_dir holds another engine's or another
      model's run, or other labels, or a best checkpoint by another metric
      (or one that a run without --keep_best would leave behind).
    manifest.DataError: the data source is unusable.
  """
  params.validate()  # First: a typo fails at once, before the data is scanned.
  train_fn = engines.get(params.engine)
  # The model found and its arguments checked, before any work; params.json
  # records every argument, defaults included, so the run can be built again.
  params = params.replace(
      model_args=registry.resolve(params.model).arguments(params.model_args))
  start = time.perf_counter()
  task = cluster_lib.current_task()
  chief = task is None or task.is_chief
  manifest = manifest_lib.load(params)
  best_lib.check_resume(params)  # Before prepare rewrites params.json.
  # In a cluster only the chief writes model_dir; the others check it.
  model_dir_lib.prepare(params, manifest.labels, write=chief)
  result = train_fn(params, manifest)
  if result is None:  # A worker or ps task of a cluster: nothing of its own to report.
    return {"task": f"{task.type}:{task.index}", "model_dir": params.model_dir}
  metrics = _metrics(params, manifest, result, start)
  if task is not None:
    metrics["task"] = f"{task.type}:{task.index}"
    metrics["workers"] = task.num_workers
  if chief:
    model_dir_lib.write_metrics(params.model_dir, metrics)
  return metrics


def _metrics(params: Params, manifest: manifest_lib.Manifest, result: engines.Result,
             start: float) -> dict[str, Any]:
  """metrics.json of a run that `start` (time.perf_counter) began and the engine's `result` ended."""
  test = result.test or {}
  return {
      "engine": params.engine,
      "model": params.model,
      "steps": result.steps,
      "val_loss": result.validation["loss"],
      "val_accuracy": result.validation["accuracy"],
      "test_loss": test.get("loss"),
      "test_accuracy": test.get("accuracy"),
      "examples_per_sec": result.examples_per_sec,
      "input_stall_fraction": result.input_stall_fraction,
      "best": result.best,
      "stopped_early": result.stopped_at is not None,
      "stopped_at_step": result.stopped_at,
      "wall_seconds": round(time.perf_counter() - start, 1),
      "all_train_files_read": _every_train_file_read(params, manifest),
      "model_dir": params.model_dir,
  }


def _every_train_file_read(params: Params, manifest: manifest_lib.Manifest) -> Optional[bool]:
  """pipeline.every_file_read of the train split; says so when the answer is no."""
  read = pipeline.every_file_read(params, manifest, "train")
  if read is False:
    logging.warning(
        "audioclf: training ended before it read every file of the train split (its first "
        "epoch): those it did not read were not checked, and a bad one among them went "
        "unnoticed; `python -m audioclf cache` with the same flags reads and checks them all")
  return read
