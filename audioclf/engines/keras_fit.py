"""The Keras engine: model.fit on input_fn, resumable from object-based checkpoints in model_dir."""

from __future__ import annotations

import math
import os
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
from audioclf.stall import KerasStallCallback, StallMeter


class _GlobalSteps(tf.keras.callbacks.Callback):
  """Keeps fit on the global step: times steps, stops at train_steps, checkpoints each epoch."""

  def __init__(self, manager: tf.train.CheckpointManager, train_steps: int,
               meters: Sequence = ()):
    super().__init__()
    self._manager = manager
    self._train_steps = train_steps
    self._meters = list(meters)

  def _step(self) -> int:
    return int(self.model.optimizer.iterations.numpy())

  def on_train_begin(self, logs=None):
    # fit restarts Keras' batch counter at 0, and TensorBoard steps its batch
    # summaries by it: start it at the global step, so a resumed run continues
    # its curves instead of drawing over the first run's.
    counter = getattr(self.model, "_train_counter", None)
    if counter is not None:
      counter.assign(self._step())

  def on_train_batch_begin(self, batch, logs=None):
    for meter in self._meters:
      meter.begin_step()

  def on_train_batch_end(self, batch, logs=None):
    for meter in self._meters:
      meter.end_step()
    # An epoch resumed from a checkpoint off the epoch grid (train_steps or
    # eval_every_steps changed) would overshoot; stop exactly at train_steps.
    # fit still evaluates and ends this epoch, so the last checkpoint is saved.
    if self._step() >= self._train_steps:
      self.model.stop_training = True

  def on_epoch_end(self, epoch, logs=None):
    self._manager.save(checkpoint_number=self._step())


def train(params: Params, manifest: Manifest) -> Result:
  """Trains with model.fit up to params.train_steps, resuming from model_dir.

  One Keras epoch is `eval_every_steps` steps (all of train_steps when 0):
  each ends with a validation pass and a checkpoint.

  Args:
    params: the run's parameters; params.model_dir already prepared.
    manifest: the loaded data manifest.

  Returns:
    The final step, validation and test metrics, training throughput and
    the input-stall fraction.
  """
  tf.keras.utils.set_random_seed(params.seed)
  device = prefetch_device(params)
  # On a GPU, a model built under a one-device strategy has fit (and
  # evaluate) distribute its datasets: their iterator copies the next batch to
  # the device while the current step runs. The stall probe stays the host
  # pipeline's last transformation. Without one, the default strategy.
  strategy = tf.distribute.OneDeviceStrategy(device) if device else tf.distribute.get_strategy()
  with strategy.scope():
    return _train(params, manifest)


def _train(params: Params, manifest: Manifest) -> Result:
  model = models.compile_model(models.build_model(params, len(manifest.labels)), params)
  # Rooted at the model, so the keys are model.save_weights' and the Estimator's:
  # model_dir.load_model reads both engines' checkpoints the same way.
  checkpoint = tf.train.Checkpoint(model)
  manager = tf.train.CheckpointManager(checkpoint, params.model_dir,
                                       max_to_keep=model_dir_lib.KEEP_CHECKPOINTS,
                                       checkpoint_name=model_dir_lib.CHECKPOINT_NAME)
  if manager.latest_checkpoint:
    # v2 optimizers make their slots on the first step; make them now, so the
    # restore fills them at once and can check that everything matched.
    model.optimizer.build(model.trainable_variables)
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    logging.info("audioclf: resuming from %s", manager.latest_checkpoint)
  step = int(model.optimizer.iterations.numpy())

  timer = StepTimer(steps_to_run=params.train_steps - step)
  meter = StallMeter()
  validation = None
  if step < params.train_steps:
    every = params.eval_every_steps or params.train_steps
    # Epochs count from the global step, so TensorBoard's epoch summaries of a
    # resumed run carry on where the last one stopped.
    initial_epoch = step // every
    history = model.fit(
        # A resumed run continues the shuffle sequence instead of replaying its start.
        metered_train_input(params, manifest, meter, seed_offset=step),
        steps_per_epoch=every,
        initial_epoch=initial_epoch,
        epochs=initial_epoch + math.ceil((params.train_steps - step) / every),
        validation_data=input_fn(params, "eval", manifest=manifest),
        callbacks=[
            _GlobalSteps(manager, params.train_steps, meters=[timer]),
            # Validation runs between batches, outside the steps this meter times.
            KerasStallCallback(meter, os.path.join(params.model_dir, "train"),
                               every_steps=stall_log_every(params)),
            tf.keras.callbacks.TensorBoard(params.model_dir,
                                           update_freq=params.log_every_steps or "epoch"),
        ])
    # The last epoch's validation ran on the final weights.
    validation = {name: history.history[f"val_{name}"][-1] for name in ("loss", "accuracy")}
  else:
    logging.info("audioclf: %s is already at step %d of %d; evaluating only",
                 params.model_dir, step, params.train_steps)
    validation = model.evaluate(input_fn(params, "eval", manifest=manifest), return_dict=True,
                                verbose=0)
  test = None
  if has_split(manifest, "test"):
    test = model.evaluate(input_fn(params, "eval", split="test", manifest=manifest),
                          return_dict=True, verbose=0)
  return Result(
      steps=int(model.optimizer.iterations.numpy()),
      validation=metric_values(validation),
      test=metric_values(test) if test is not None else None,
      examples_per_sec=timer.examples_per_sec(params.batch_size),
      input_stall_fraction=stall_fraction(meter))
