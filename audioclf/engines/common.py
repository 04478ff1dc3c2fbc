"""What both engines share: the Result they return, their log lines and the metered training input."""

from __future__ import annotations

import dataclasses
from typing import Optional

import tensorflow as tf
from absl import logging

from audioclf.data.manifest import Manifest
from audioclf.data.pipeline import input_fn
from audioclf.engines.stall import StallMeter
from audioclf.model import best as best_lib
from audioclf.params import Params

METRIC_NAMES = ("loss", "accuracy")  # What compile_model asks for; both engines report these.


@dataclasses.dataclass(frozen=True)
class Result:
  steps: int  # The global step training ended at.
  validation: dict[str, float]  # METRIC_NAMES on the validation split.
  test: Optional[dict[str, float]]  # The same on the test split; None where it is empty.
  examples_per_sec: Optional[float]  # Training throughput; None when too few steps ran.
  # Share of training step time spent waiting for input (audioclf.engines.stall); None when no step ran.
  input_stall_fraction: Optional[float] = None
  best: Optional[dict] = None  # --keep_best: {"metric", "value", "step"} of the best evaluation.
  stopped_at: Optional[int] = None  # The step early stopping ended the run at; None if it did not.


def result(params: Params, steps: int, validation: dict, test: Optional[dict], clock,
           meter: StallMeter, tracker: Optional[best_lib.Tracker]) -> Result:
  """The Result of a run that ended at `steps`, from its evaluations, clock, meter and Tracker.

  Args:
    params: the run's parameters.
    steps: the global step training ended at.
    validation: the engine's evaluation dict (METRIC_NAMES among its keys).
    test: the same on the test split; None where it is empty.
    clock: the run's training StepClock.
    meter: the run's StallMeter.
    tracker: the run's best Tracker; None without --keep_best.
  """
  selected = {}
  if tracker is not None:
    stopped = tracker.exhausted and steps < params.train_steps
    selected = {"best": tracker.summary(), "stopped_at": steps if stopped else None}
  return Result(
      steps=steps,
      validation=metric_values(validation),
      test=metric_values(test) if test is not None else None,
      examples_per_sec=clock.examples_per_sec(params.batch_size),
      input_stall_fraction=stall_fraction(meter),
      **selected)


def offer_best(tracker: best_lib.Tracker, step: int, results: dict,
               checkpoint: Optional[str]) -> bool:
  """Gives one evaluation and its checkpoint to the run's Tracker; True where training stops there."""
  tracker.update(step, metric_values(results), checkpoint)
  if tracker.exhausted:
    logging.info("audioclf: no better %s in %d evaluations: stopping at step %d",
                 tracker.metric, tracker.patience, step)
  return tracker.exhausted


def log_evaluating_only(params: Params, step: int) -> None:
  """Says that a run already at train_steps, or stopped early, is evaluated and not trained."""
  logging.info("audioclf: %s is already at step %d of %d%s; evaluating only",
               params.model_dir, step, params.train_steps,
               ", stopped early" if step < params.train_steps else "")


def has_split(manifest: Manifest, split: str) -> bool:
  return bool(manifest.split(split))


def metric_values(results: dict) -> dict[str, float]:
  """METRIC_NAMES from an engine's evaluation dict, as plain floats for JSON."""
  return {name: float(results[name]) for name in METRIC_NAMES}


def prefetch_device(params: Params) -> Optional[str]:
  """The device training batches are prefetched to, or None: they stay on the host.

  "auto" picks the first GPU TensorFlow sees; a CPU-only machine has nothing
  to copy to (the step runs where the batch already is).
  """
  if params.prefetch_device == "auto":
    gpus = tf.config.list_logical_devices("GPU")
    return gpus[0].name if gpus else None
  return None if params.prefetch_device in ("", "none") else params.prefetch_device


def metered_train_input(params: Params, manifest: Manifest, meter: StallMeter,
                        seed_offset=None, shard=None) -> tf.data.Dataset:
  """input_fn's training dataset, with `meter`'s probe after its last transformation.

  Call it where the engine wants the dataset built: eagerly for Keras fit,
  inside the Estimator's input_fn (its graph) for the Estimator. seed_offset
  and shard go to input_fn.
  """
  return meter.attach(input_fn(params, "train", manifest=manifest, seed_offset=seed_offset,
                               shard=shard))


def stall_log_every(params: Params) -> int:
  """Steps between input/stall_fraction summaries: the run's log interval, else its evaluations."""
  return params.log_every_steps or params.eval_every_steps or params.train_steps


def stall_fraction(meter: StallMeter) -> Optional[float]:
  """The run's input-stall fraction for metrics.json.

  None when no step was measured, or when no batch passed the meter's probe
  (a dataset it was never attached to would read as zero stall).
  """
  return round(meter.fraction, 4) if meter.steps and meter.probes else None
