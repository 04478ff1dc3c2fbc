"""What both engines share: the Result they return and the metered training input."""

from __future__ import annotations

import dataclasses
from typing import Optional

import tensorflow as tf

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


def selection(tracker: Optional[best_lib.Tracker], steps: int, params: Params) -> dict:
  """Result's best and stopped_at fields, from the run's best Tracker (None without --keep_best)."""
  if tracker is None:
    return {}
  stopped = tracker.exhausted and steps < params.train_steps
  return {"best": tracker.summary(), "stopped_at": steps if stopped else None}


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
