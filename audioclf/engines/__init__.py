"""Training: the engines by name, each training `build_model`'s model its own way, and what they share.

  train.py      train(): a run as params describe it, with the engine it names
  keras_engine.py the Keras engine: strategies, checkpoints, evaluation
  keras_loop.py the one Keras model.fit of every run (engine, tuner trials, benchmarks)
  estimator_engine.py  the Estimator engine (legacy stack): model_to_estimator, train_and_evaluate
  common.py     what both engines share: their Result, log lines, metered training input
  stall.py      the input-stall meter: how much of each step waits for its batch
  clock.py      StepClock: the one timer of training steps

An engine module has `train(params, manifest) -> engines.common.Result`; it
leaves object-based checkpoints in params.model_dir that `model_dir.load_model`
restores, whichever engine wrote them, and with --keep_best feeds each
evaluation to a `model.best.Tracker` (and stops early where it says so).
"""

from __future__ import annotations

import importlib
from typing import Callable

from audioclf import compat
from audioclf.data.manifest import Manifest
from audioclf.engines.common import Result
from audioclf.params import ENGINES, ParamError, Params


def available() -> tuple[str, ...]:
  """The engines this stack runs: both on the legacy stack; no Estimator on the current one."""
  return tuple(name for name in ENGINES if name != "estimator" or compat.ESTIMATOR)


def get(name: str) -> Callable[[Params, Manifest], Result]:
  """The `train` function of engine `name`.

  Raises:
    ParamError: an unknown engine.
    compat.StackError: the Estimator engine, on a stack without tf.estimator.
  """
  if name not in ENGINES:
    raise ParamError(f"--engine={name}: must be one of {', '.join(ENGINES)}")
  if name == "estimator":
    compat.require_estimator()
  # Each engine is its own module, imported on first use: the Keras engine need not load
  # tf.estimator.
  return importlib.import_module(f"audioclf.engines.{name}_engine").train
