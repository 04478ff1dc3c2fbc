"""The Estimator engine: model_to_estimator on the same compiled model, run by train_and_evaluate."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf
from absl import logging

from audioclf import model_dir as model_dir_lib
from audioclf import models
from audioclf.engines.common import (Result, StepTimer, has_split, metered_train_input,
                                     metric_values, prefetch_device, stall_fraction,
                                     stall_log_every)
from audioclf.manifest import Manifest
from audioclf.params import Params
from audioclf.pipeline import input_fn
from audioclf.stall import EstimatorStallHook, StallMeter


class _StepHook(tf.estimator.SessionRunHook):
  """Tells step meters when each training step begins and ends."""

  def __init__(self, meters: Sequence):
    self._meters = list(meters)

  def before_run(self, run_context):
    for meter in self._meters:
      meter.begin_step()

  def after_run(self, run_context, run_values):
    for meter in self._meters:
      meter.end_step()  # A no-op where _EndStepBeforeSave already ended it.


class _EndStepBeforeSave(tf.estimator.CheckpointSaverListener):
  """Ends the step before a checkpoint is written and evaluated.

  The Estimator runs its CheckpointSaverHook, and the evaluation its listener
  starts, before any train hook's after_run: without this, a step with a
  checkpoint would count the whole evaluation as training time.
  """

  def __init__(self, meters: Sequence):
    self._meters = list(meters)

  def before_save(self, session, global_step_value):
    for meter in self._meters:
      meter.end_step()


def train(params: Params, manifest: Manifest) -> Result:
  """Trains with tf.estimator.train_and_evaluate up to params.train_steps, resuming from model_dir.

  The model is `models.build_model`'s, compiled by `models.compile_model`:
  model_to_estimator clones it into the Estimator's graph, so there is no
  hand-written model_fn to drift from the Keras engine. A checkpoint, and an
  evaluation of it, come every `eval_every_steps` (only at the end when 0).

  Args:
    params: the run's parameters; params.model_dir already prepared.
    manifest: the loaded data manifest.

  Returns:
    The final step, validation and test metrics, training throughput and
    the input-stall fraction.
  """
  # The Keras weights are drawn here, eagerly, exactly as in the Keras engine;
  # model_to_estimator warm-starts the Estimator from them.
  tf.keras.utils.set_random_seed(params.seed)
  model = models.compile_model(models.build_model(params, len(manifest.labels)), params)
  every = params.eval_every_steps or params.train_steps
  config = tf.estimator.RunConfig(
      model_dir=params.model_dir,
      tf_random_seed=params.seed,
      save_checkpoints_steps=every,
      keep_checkpoint_max=model_dir_lib.KEEP_CHECKPOINTS,
      save_summary_steps=params.log_every_steps or None,
      log_step_count_steps=params.log_every_steps or None)
  # The default checkpoint_format="checkpoint" saves object-based checkpoints
  # keyed like the Keras model's own, which model_dir.load_model restores.
  estimator = tf.keras.estimator.model_to_estimator(keras_model=model, config=config)

  # The Estimator calls each input_fn inside its own graph; the features key
  # "waveform" is matched to the Keras Input of that name.
  def eval_input(split="validation"):
    return lambda: input_fn(params, "eval", split=split, manifest=manifest)

  latest = tf.train.latest_checkpoint(params.model_dir)
  start_step = model_dir_lib.checkpoint_step(latest) if latest else 0
  timer = StepTimer(steps_to_run=params.train_steps - start_step)
  meter = StallMeter()
  device = prefetch_device(params)

  def train_input():
    ds = metered_train_input(params, manifest, meter)
    if device:
      # The last transformation: the next batches wait on the device. The
      # Estimator's initializable iterator is colocated with the dataset's
      # last op, so it reads them there (tensorflow#37277, in TF since 2.3).
      ds = ds.apply(tf.data.experimental.prefetch_to_device(device, buffer_size=2))
    return ds

  if start_step < params.train_steps:
    # The stall hook begins and ends the meter's steps; the saving listener
    # ends a step that saves before the checkpoint and its evaluation, for the
    # meter as for the timer, so neither counts evaluation as a training step.
    hooks = [_StepHook([timer]),
             EstimatorStallHook(meter, params.model_dir, every_steps=stall_log_every(params))]
    validation, _ = tf.estimator.train_and_evaluate(
        estimator,
        # The probe goes in inside the input_fn: the Estimator builds the
        # dataset in its own graph.
        tf.estimator.TrainSpec(train_input,
                               max_steps=params.train_steps, hooks=hooks,
                               saving_listeners=[_EndStepBeforeSave([timer, meter])]),
        # throttle_secs=0: evaluate every checkpoint; their spacing is the schedule.
        tf.estimator.EvalSpec(eval_input(), steps=None, throttle_secs=0))
  else:
    # Estimator.train would not see that max_steps is reached: it looks for a
    # variable named "global_step", and object-based checkpoints call it
    # "estimator_global_step/...". It would run one more step.
    logging.info("audioclf: %s is already at step %d of %d; evaluating only",
                 params.model_dir, start_step, params.train_steps)
    validation = estimator.evaluate(eval_input())
  test = estimator.evaluate(eval_input("test"), name="test") if has_split(manifest, "test") else None
  return Result(
      steps=int(validation["global_step"]),
      validation=metric_values(validation),
      test=metric_values(test) if test is not None else None,
      examples_per_sec=timer.examples_per_sec(params.batch_size),
      input_stall_fraction=stall_fraction(meter))
