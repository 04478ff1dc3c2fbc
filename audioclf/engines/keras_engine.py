"""The Keras engine: model.fit on input_fn, resumable from object-based checkpoints in model_dir."""

from __future__ import annotations

import functools
import math
import os
import shutil
import signal
import tempfile
import threading
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from audioclf import compat
from audioclf.compat import keras
from audioclf.data.manifest import DataError, Manifest
from audioclf.data.pipeline import cached_clips, element_spec, fill_cache, input_fn
from audioclf.distributed import cluster as cluster_lib
from audioclf.embeddings import fit as embed_fit
from audioclf.engines import keras_loop
from audioclf.engines.clock import training_clock
from audioclf.engines.common import (
  METRIC_NAMES,
  Result,
  has_split,
  log_evaluating_only,
  metered_train_input,
  offer_best,
  prefetch_device,
  result,
  stall_log_every,
)
from audioclf.engines.stall import StallMeter
from audioclf.model import best as best_lib
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import Params


def train(params: Params, manifest: Manifest) -> Result:
  """Trains with model.fit up to params.train_steps, resuming from model_dir.

  One Keras epoch is `eval_every_steps` steps (all of train_steps when 0):
  each ends with a validation pass and a checkpoint; with --keep_best, a
  copy of it in best/ when its validation is the best so far, and with
  --early_stopping_patience, the run's end when too many were not.

  Args:
    params: the run's parameters; params.model_dir already prepared.
    manifest: the loaded data manifest.

  Returns:
    The final step, validation and test metrics, training throughput and
    the input-stall fraction.
  """
  task = cluster_lib.current_task()
  strategy = make_strategy(params, task)
  keras.utils.set_random_seed(params.seed)
  if _distributes_input(strategy):
    # Each worker reads its shard of every split from the cache.
    fill_cache(params, manifest, splits=("train", "validation", "test"))
  with strategy.scope():
    return _train(params, manifest, strategy, task is None or task.is_chief)


def make_strategy(params: Params, task: Optional[cluster_lib.Task]) -> tf.distribute.Strategy:
  """The tf.distribute strategy fit runs under.

  - TF_CONFIG names more than one worker: MultiWorkerMirroredStrategy
    (synchronous, all-reduce; every local GPU of every worker).
  - --strategy=mirrored: MirroredStrategy over this host's GPUs, or its
    logical CPUs where it has no GPU.
  - On a GPU: a one-device strategy, so fit (and evaluate) distribute their
    datasets, whose iterator copies the next batch to the device while the
    current step runs (the stall probe stays the host pipeline's last
    transformation).
  - Else the default strategy.

  Call it before TensorFlow runs anything in this process: the multi-worker
  strategy configures the collective ops of the eager context, which must
  not exist yet.

  Raises:
    ValueError: TF_CONFIG names parameter servers, which this engine does not use.
  """
  if task is not None and task.num_workers > 1:
    if task.cluster.get("ps"):
      raise ValueError("the Keras engine trains on several workers with all-reduce "
                       "(MultiWorkerMirroredStrategy), and TF_CONFIG names ps tasks: "
                       f"{task.cluster}. Drop them, or use --engine=estimator.")
    return _multi_worker_strategy()
  if params.strategy == "mirrored":
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy([d.name for d in devices])
  device = prefetch_device(params)
  return tf.distribute.OneDeviceStrategy(device) if device else tf.distribute.get_strategy()


def _multi_worker_strategy() -> tf.distribute.MultiWorkerMirroredStrategy:
  """MultiWorkerMirroredStrategy, with the process's own SIGTERM handler kept.

  Its coordination service installs TensorFlow's own SIGTERM handler (the
  preemption notifier of tf.distribute's PreemptionCheckpointHandler, which
  audioclf does not use), under which a worker that SIGTERM should stop
  (`audioclf launch` stopping its tasks, a scheduler) would train on to the end.
  """
  before = signal.getsignal(signal.SIGTERM)
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  if before is not None and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, before)
  return strategy


def _distributes_input(strategy: tf.distribute.Strategy) -> bool:
  """Whether the input must be built per input pipeline (several replicas or workers)."""
  return strategy.num_replicas_in_sync > 1 or isinstance(
      strategy, tf.distribute.MultiWorkerMirroredStrategy)


def _input(strategy: tf.distribute.Strategy, params: Params,
           make: Callable[[Params, Optional[tuple[int, int]]], tf.data.Dataset]):
  """make(params, shard)'s dataset, or, under a strategy of several replicas, one per worker.

  Each worker (on one host: each replica) builds its own pipeline over its
  shard of the file order (the files are chosen before anything is read, not
  by tf.data's auto-sharding, which would have every worker read everything
  and keep its part), batched at its replicas' share of the global batch_size.
  """
  if not _distributes_input(strategy):
    return make(params, None)

  def per_worker(context: tf.distribute.InputContext) -> tf.data.Dataset:
    shard = None
    if context.num_input_pipelines > 1:
      shard = (context.input_pipeline_id, context.num_input_pipelines)
    return make(params.replace(batch_size=context.get_per_replica_batch_size(params.batch_size)),
                shard)

  return strategy.distribute_datasets_from_function(per_worker, _input_options(strategy))


def _input_options(strategy: tf.distribute.Strategy) -> tf.distribute.InputOptions:
  """One input pipeline per replica on one host (mirrored), else one per worker.

  Replicas on CPUs read their pipelines' batches where they are: fetching
  them "to the device" would add a multi-device iterator, whose own
  pipelines autotune, with the wait at its destruction that
  data/batches.py's AUTOTUNE describes.
  """
  mirrored = isinstance(strategy, tf.distribute.MirroredStrategy)
  return tf.distribute.InputOptions(
      experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA if mirrored
      else tf.distribute.InputReplicationMode.PER_WORKER,
      experimental_fetch_to_device=not _on_cpus(strategy))


def _on_cpus(strategy: tf.distribute.Strategy) -> bool:
  return all(tf.DeviceSpec.from_string(d).device_type == "CPU"
             for d in strategy.extended.worker_devices)


class _Checkpoints:
  """Saves: a CheckpointManager over model_dir on the chief; elsewhere, a write to a temp dir.

  Under MultiWorkerMirroredStrategy every worker must take part in a save,
  but only the chief's may land in model_dir; the others write to a
  temporary folder and delete it (as TensorFlow's multi-worker guide does).
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, model_dir: str, chief: bool):
    self._checkpoint, self._model_dir, self._chief = checkpoint, model_dir, chief
    self._manager = self._make_manager(model_dir) if chief else None
    # Every worker resumes from the chief's latest checkpoint.
    self.latest_checkpoint = tf.train.latest_checkpoint(model_dir)

  def _make_manager(self, directory: str) -> tf.train.CheckpointManager:
    return model_dir_lib.checkpoint_manager(self._checkpoint, directory)

  @property
  def saved(self) -> Optional[str]:
    """The checkpoint this task last saved into model_dir (None off the chief)."""
    return self._manager.latest_checkpoint if self._chief else None

  def save(self, checkpoint_number: int) -> None:
    if self._chief:
      self._manager.save(checkpoint_number=checkpoint_number)
      return
    # The very same save call as the chief's (the workers' collective ops must
    # match), into a folder of its own that goes right after.
    scratch = tempfile.mkdtemp(prefix="audioclf-worker-checkpoint-")
    try:
      self._make_manager(scratch).save(checkpoint_number=checkpoint_number)
    finally:
      shutil.rmtree(scratch, ignore_errors=True)


class _KeepBest(keras.callbacks.Callback):
  """Gives each epoch's validation, and the checkpoint just saved, to the run's best Tracker.

  After keras_loop's own callbacks, so the epoch's checkpoint is saved
  first. Once early stopping's patience has run out, the run stops there:
  every worker of a cluster sees the same validation, so all stop together.
  """

  def __init__(self, tracker: best_lib.Tracker, checkpoints: _Checkpoints):
    super().__init__()
    self._tracker, self._checkpoints = tracker, checkpoints

  def on_epoch_end(self, epoch, logs=None):
    step = int(self.model.optimizer.iterations.numpy())
    results = {name: logs[f"val_{name}"] for name in METRIC_NAMES}
    if offer_best(self._tracker, step, results, self._checkpoints.saved):
      self.model.stop_training = True


def evaluation_batching(clips: int, pipelines: int, replicas: int,
                        batch_size: int) -> tuple[int, int]:
  """(replica batch, steps) that give every replica a non-empty batch at every step of a pass.

  Each of `pipelines` input pipelines reads every pipelines-th clip of the
  split (so their shares differ by one clip at most) and hands its batches
  in turn to its replicas_per_pipeline replicas. A replica that ran out
  would get an empty batch, which TensorFlow's kernels do not all take (CPU
  RFFT and convolutions reject it): so pick the largest replica batch, up to
  batch_size / replicas, at which every pipeline yields the same number of
  batches, a multiple of its replicas. Larger ones are tried only where no
  smaller one fits; a split of fewer clips than replicas cannot be spread.

  Raises:
    DataError: fewer clips than replicas (a user's to fix: one line, no traceback).
  """
  if clips < replicas:
    raise DataError(f"a split of {clips} clips cannot be evaluated on {replicas} replicas: "
                     "each needs one clip at least; use fewer workers or devices")
  local = replicas // pipelines
  shares = {clips // pipelines, -(-clips // pipelines)}
  wanted = max(1, batch_size // replicas)
  for batch in [*range(wanted, 0, -1), *range(wanted + 1, max(shares) + 1)]:
    counts = {-(-share // batch) for share in shares}
    if len(counts) == 1 and counts.pop() % local == 0:
      return batch, -(-max(shares) // batch) // local
  raise ValueError(f"no replica batch spreads {clips} clips evenly over {pipelines} input "
                   f"pipelines of {local} replicas each; use fewer workers or devices")


def _evaluation(strategy: tf.distribute.Strategy, params: Params, manifest: Manifest,
                split: str = "validation") -> dict:
  """fit's validation_data/validation_steps (or evaluate's x/steps) for one pass over `split`.

  Under several replicas, each worker evaluates its shard, at a batch size
  that never leaves a replica an empty batch (evaluation_batching): every
  clip is evaluated exactly once, and the metrics, summed over replicas,
  are those of one process. Keras needs the step count of a distributed
  dataset.
  """
  def make(p, shard):
    return input_fn(p, "eval", split=split, manifest=manifest, shard=shard)

  if not _distributes_input(strategy):
    return {"x": make(params, None), "steps": None}
  replicas = strategy.num_replicas_in_sync
  if _input_options(strategy) is not None:
    pipelines = replicas
  else:
    task = cluster_lib.current_task()
    pipelines = task.num_workers if task is not None else 1
  batch, steps = evaluation_batching(cached_clips(params, manifest, split), pipelines, replicas,
                                     params.batch_size)
  return {"x": _input(strategy, params.replace(batch_size=batch * replicas), make),
          "steps": steps}


def _train(params: Params, manifest: Manifest, strategy: tf.distribute.Strategy,
           chief: bool) -> Result:
  model = models.compile_model(models.build_model(params, len(manifest.labels)), params,
                               class_counts=manifest.label_counts("train"))
  compat.fit_under(model, strategy, element_spec(params, "train", len(manifest.labels)))
  manager = _restore(model, params, chief)
  step = int(model.optimizer.iterations.numpy())
  best = best_lib.tracker(params, write=chief)
  clock = training_clock(steps_to_run=params.train_steps - step)
  meter = StallMeter()
  validation = _evaluation(strategy, params, manifest)
  if step < params.train_steps and not (best and best.exhausted):
    history = _fit(model, params, manifest, strategy, chief, manager, best, clock, meter,
                   validation)
    # The last epoch's validation ran on the final weights.
    validation = {name: history.history[f"val_{name}"][-1] for name in METRIC_NAMES}
  else:
    log_evaluating_only(params, step)
    validation = _evaluate(model, validation)
  test = None
  if has_split(manifest, "test"):
    test = _evaluate(model, _evaluation(strategy, params, manifest, "test"))
  return result(params, int(model.optimizer.iterations.numpy()), validation, test, clock, meter,
                best)


def _evaluate(model: keras.Model, evaluation: dict) -> dict:
  """model.evaluate on _evaluation's dataset and steps, its iterator released on return."""
  with keras_loop.passes_released():
    return model.evaluate(evaluation["x"], steps=evaluation["steps"], return_dict=True, verbose=0)


def _restore(model: keras.Model, params: Params, chief: bool) -> "_Checkpoints":
  """The run's checkpoint writer, `model` restored from model_dir's latest checkpoint if any."""
  # Rooted at the model, so the keys are model.save_weights' and the Estimator's:
  # model_dir.load_model reads both engines' checkpoints the same way.
  checkpoint = tf.train.Checkpoint(model)
  manager = _Checkpoints(checkpoint, params.model_dir, chief)
  if manager.latest_checkpoint:
    # The optimizer's slots made now (keras_loop.fit would, later), so the
    # restore fills them at once and can check that everything matched.
    compat.build_optimizer(model)
    model_dir_lib.assert_matched(checkpoint.restore(manager.latest_checkpoint),
                                 manager.latest_checkpoint)
    logging.info("audioclf: resuming from %s", manager.latest_checkpoint)
  return manager


def _fit(model, params: Params, manifest: Manifest, strategy, chief: bool, manager, best,
         clock, meter: StallMeter, validation: dict) -> keras.callbacks.History:
  """keras_loop.fit from the model's step to train_steps, an epoch every eval_every_steps."""
  step = int(model.optimizer.iterations.numpy())
  every = params.eval_every_steps or params.train_steps
  # Epochs count from the global step, so TensorBoard's epoch summaries of a
  # resumed run carry on where the last one stopped.
  initial_epoch = step // every
  first = []
  head = embed_fit.plan(params, model, manifest, distributed=_distributes_input(strategy))
  if head is not None:
    # The head alone, on cached embeddings; the full model evaluates, before anything reads it.
    first = [head.validation(functools.partial(_evaluate, model, validation))]
    validation = {"x": None, "steps": None}
  return keras_loop.fit(
      model if head is None else head.head,
      # A resumed run continues the shuffle sequence instead of replaying its start.
      meter.attach(head.dataset(step)) if head is not None else
      _input(strategy, params, lambda p, shard: metered_train_input(
          p, manifest, meter, seed_offset=step, shard=shard)),
      steps_per_epoch=every,
      initial_epoch=initial_epoch,
      epochs=initial_epoch + math.ceil((params.train_steps - step) / every),
      meter=meter,
      clocks=[clock],
      train_steps=params.train_steps,
      save=manager.save,  # A checkpoint at the global step, every epoch.
      # Only the chief writes summaries into model_dir.
      stall_log_dir=os.path.join(params.model_dir, "train") if chief else None,
      stall_log_every=stall_log_every(params),
      tensorboard_dir=params.model_dir if chief else None,
      tensorboard_update_freq=params.log_every_steps or "epoch",
      validation_data=validation["x"],
      validation_steps=validation["steps"],
      callbacks=[_KeepBest(best, manager)] if best else [],
      first_callbacks=first)
