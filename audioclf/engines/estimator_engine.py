"""The Estimator engine: model_to_estimator of the compiled model, run by train_and_evaluate."""

from __future__ import annotations

import signal
import threading
import time
from typing import Optional, Sequence

import tensorflow as tf
from absl import logging

from audioclf import compat
from audioclf.compat import keras
from audioclf.data import service as dataservice
from audioclf.data.manifest import Manifest
from audioclf.data.pipeline import fill_cache, input_fn
from audioclf.distributed import cluster as cluster_lib
from audioclf.embeddings import estimator as embed_estimator
from audioclf.embeddings import fit as embed_fit
from audioclf.engines.clock import EstimatorClockHook, StepClock, training_clock
from audioclf.engines.common import (
  Result,
  has_split,
  log_evaluating_only,
  metered_train_input,
  metric_values,
  offer_best,
  prefetch_device,
  result,
  stall_log_every,
)
from audioclf.engines.stall import EstimatorStallHook, StallMeter
from audioclf.model import best as best_lib
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import ParamError, Params

compat.require_estimator()  # Before tf.estimator is first touched: say which stack has it.


def _serve(task: cluster_lib.Task) -> None:
  """A parameter server: serves the cluster's variables until SIGTERM or SIGINT, then returns.

  train_and_evaluate's ps waits in server.join() for ever, where no signal
  handler can run; here the launcher's SIGTERM ends it with exit code 0.
  """
  stop = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stop.set())
  server = tf.distribute.Server(tf.train.ClusterSpec(task.cluster), job_name=task.type,
                                task_index=task.index, start=True)
  logging.info("audioclf: ps:%d serving at %s until stopped", task.index, server.target)
  while not stop.wait(1.0):
    pass
  logging.info("audioclf: ps:%d stopped", task.index)


def _wait_for_chief(model_dir: str, timeout_s: float = 120.0) -> None:
  """Waits until the chief has written its first checkpoint (its variables exist), or timeout_s.

  A worker that asks for the model before the chief has initialized it
  checks again only 30 s later (tf.compat.v1.train.SessionManager's
  recovery_wait_secs, which the Estimator does not expose): on a short run it
  would join after training ended. The chief saves a checkpoint as soon as its
  session exists.
  """
  deadline = time.monotonic() + timeout_s
  while model_dir_lib.own_latest_checkpoint(model_dir) is None and time.monotonic() < deadline:
    time.sleep(0.2)


def _evaluator_result(metrics: Optional[dict], params: Params) -> Result:
  if metrics is None:
    raise RuntimeError(f"the evaluator found no checkpoint of step {params.train_steps} in "
                       f"{params.model_dir} to evaluate")
  return Result(steps=int(metrics["global_step"]), validation=metric_values(metrics), test=None,
                examples_per_sec=None)


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


class _LastEvaluation(tf.estimator.Exporter):
  """Keeps the latest evaluation's metrics: how an evaluator task learns its results.

  train_and_evaluate returns nothing on the tasks of a cluster; an EvalSpec's
  exporters are called with every evaluation's result. Exports nothing.
  """

  def __init__(self):
    self.metrics = None

  @property
  def name(self):
    return "last_evaluation"

  def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
    self.metrics = dict(eval_result)


class _KeepBest(tf.estimator.Exporter):
  """Gives each evaluation, and the checkpoint it evaluated, to the run's best Tracker.

  An EvalSpec's exporters see every evaluation's result and checkpoint, on
  the process that evaluates (locally, inside the checkpoint's save; in a
  cluster, the evaluator task). Exports nothing itself.
  """

  def __init__(self, tracker: best_lib.Tracker):
    self.tracker = tracker

  @property
  def name(self):
    return "keep_best"

  def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
    offer_best(self.tracker, int(eval_result["global_step"]), eval_result, checkpoint_path)


class _StopEarly(tf.estimator.SessionRunHook):
  """Ends training at the step whose evaluation used up early stopping's patience.

  The Estimator runs its CheckpointSaverHook, and so the evaluation and the
  exporters, before any train hook's after_run of the same step: this one
  sees that evaluation's verdict in time to stop right there, so no step is
  trained after it and no extra checkpoint or evaluation follows.
  """

  def __init__(self, tracker: best_lib.Tracker):
    self._tracker = tracker

  def after_run(self, run_context, run_values):
    if self._tracker.exhausted:
      run_context.request_stop()


def train(params: Params, manifest: Manifest) -> Optional[Result]:
  """Trains with tf.estimator.train_and_evaluate up to params.train_steps, resuming from model_dir.

  The model is `models.build_model`'s, compiled by `models.compile_model`:
  model_to_estimator clones it into the Estimator's graph, so there is no
  hand-written model_fn to drift from the Keras engine. A checkpoint, and an
  evaluation of it, come every `eval_every_steps` (only at the end when 0);
  with --keep_best, a copy of it in best/ when its evaluation is the best so
  far, and with --early_stopping_patience, the run's end when too many were
  not (in one process; a cluster keeps the best on its evaluator task).
  With --embedding_views and a frozen pretrained front end, the training
  step is the head view's on cached embeddings (`embeddings.estimator`),
  and evaluation still the full model's on raw audio.

  Where TF_CONFIG names a cluster, this process is one task of TensorFlow's
  between-graph replication: the chief and the workers each train on their
  own share of every epoch's files (the variables, on the ps tasks, take
  their updates as they come), the ps tasks serve until they are stopped, and
  an evaluator task evaluates each checkpoint as it appears. The chief
  writes the checkpoints and summaries, and evaluates the final one.

  Args:
    params: the run's parameters; params.model_dir already prepared.
    manifest: the loaded data manifest.

  Returns:
    The final step, validation and test metrics, training throughput and
    the input-stall fraction; the evaluator's has its last validation only.
    None on a worker or ps task.

  Raises:
    ValueError: TF_CONFIG names more than one training task but no ps.
    params.ParamError: --early_stopping_patience in a cluster.
  """
  task = cluster_lib.current_task()
  if task is not None and task.type == "ps":
    _serve(task)
    return None
  _check_cluster(params, task)
  return _Run(params, manifest, task).train()


def _check_cluster(params: Params, task: Optional[cluster_lib.Task]) -> None:
  if task is None:
    return
  if task.num_workers > 1 and not task.cluster.get("ps"):
    raise ValueError("the Estimator trains on several workers through parameter servers, and "
                     f"TF_CONFIG's cluster has none: {task.cluster}. Add ps tasks "
                     "(python -m audioclf launch --ps=1).")
  if params.early_stopping_patience:
    # Its evaluator alone would know when to stop, and no task tells the others.
    raise ParamError(f"--early_stopping_patience={params.early_stopping_patience}: the "
                     "Estimator stops early when it trains in one process, not in a cluster; "
                     "drop it there (--keep_best still keeps the best checkpoint), or use "
                     "--engine=keras")


def _model(params: Params, manifest: Manifest) -> keras.Model:
  """The run's compiled model, its weights drawn eagerly, exactly as in the Keras engine."""
  keras.utils.set_random_seed(params.seed)
  return models.compile_model(models.build_model(params, len(manifest.labels)), params,
                              class_counts=manifest.label_counts("train"))


def _estimator(params: Params, model: keras.Model) -> tf.estimator.Estimator:
  """model_to_estimator of `model`, its weights the start, saving every eval_every_steps."""
  config = tf.estimator.RunConfig(
      model_dir=params.model_dir,
      tf_random_seed=params.seed,
      save_checkpoints_steps=params.eval_every_steps or params.train_steps,
      keep_checkpoint_max=model_dir_lib.KEEP_CHECKPOINTS,
      save_summary_steps=params.log_every_steps or None,
      log_step_count_steps=params.log_every_steps or None,
      # Workers start with the chief, not 5 s apart per task number.
      experimental_max_worker_delay_secs=0)
  # The default checkpoint_format="checkpoint" saves object-based checkpoints
  # keyed like the Keras model's own, which model_dir.load_model restores.
  return keras.estimator.model_to_estimator(keras_model=model, config=config)


class _Run:
  """One process's part of an Estimator run: a training task, or an evaluator."""

  def __init__(self, params: Params, manifest: Manifest, task: Optional[cluster_lib.Task]):
    self.params, self.manifest, self.task = params, manifest, task
    self.chief = task is None or task.is_chief
    if self.chief:
      model_dir_lib.localize_checkpoint_list(params.model_dir)
    self.latest = model_dir_lib.own_latest_checkpoint(params.model_dir)
    self.start_step = model_dir_lib.checkpoint_step(self.latest) if self.latest else 0
    model = _model(params, manifest)
    # With --embedding_views, the head trains on cached embeddings (or why not is logged),
    # embedded before model_to_estimator, after which the eager model runs no more.
    cut = (embed_fit.cut(params, model, manifest, distributed=task is not None)
           if self.start_step < params.train_steps else None)
    self.estimator = _estimator(params, model)
    self.head = embed_estimator.head(params, model, cut, self.estimator) if cut else None
    if self.head is not None:
      self.estimator = self.head.estimator
    # Locally this process evaluates; in a cluster, the evaluator task does.
    self.best = best_lib.tracker(params, write=task is None or task.type == "evaluator")
    self.clock = training_clock(steps_to_run=params.train_steps - self.start_step)
    self.meter = StallMeter()
    self.shard = None
    if params.data_service:
      dataservice.check_workers(params, manifest)  # Eagerly: train_input runs in a graph.
    if task is not None and task.type != "evaluator":
      self.shard = (task.worker_id, task.num_workers)
      # A worker reads its share of the train split from the cache: fill it
      # first (a no-op where it is there; concurrent fills are safe).
      fill_cache(params, manifest, splits=("train",))

  def eval_input(self, split: str = "validation"):
    # The Estimator calls each input_fn inside its own graph; the features key
    # "waveform" is matched to the Keras Input of that name.
    return lambda: input_fn(self.params, "eval", split=split, manifest=self.manifest)

  def train_input(self) -> tf.data.Dataset:
    # The seed offset is the step training starts from, read here rather than
    # from the global step in the graph: in a cluster that variable lives on a
    # ps, and no input op may be placed there. The probe goes in here too: the
    # Estimator builds the dataset in its own graph.
    if self.head is not None:
      ds = self.meter.attach(self.head.dataset(self.start_step))
    else:
      ds = metered_train_input(self.params, self.manifest, self.meter,
                               seed_offset=self.start_step, shard=self.shard)
    device = prefetch_device(self.params)
    if device:
      # The last transformation: the next batches wait on the device. The
      # Estimator's initializable iterator is colocated with the dataset's
      # last op, so it reads them there (tensorflow#37277, in TF since 2.3).
      ds = ds.apply(tf.data.experimental.prefetch_to_device(device, buffer_size=2))
    return ds

  def train(self) -> Optional[Result]:
    """Trains (or, where training is over, evaluates); the Result, or None on a worker."""
    params, task = self.params, self.task
    if self.start_step < params.train_steps and not (self.best and self.best.exhausted):
      outcome = self._train_and_evaluate()
      if outcome is None or isinstance(outcome, Result):
        return outcome  # A worker's None, or the evaluator task's result.
      validation = outcome
    elif task is not None and not self.chief:
      return None
    else:
      # Estimator.train would not see that max_steps is reached: it looks for a
      # variable named "global_step", and object-based checkpoints call it
      # "estimator_global_step/...". It would run one more step.
      log_evaluating_only(params, self.start_step)
      validation = self.estimator.evaluate(self.eval_input())
    return self._result(validation)

  def _train_and_evaluate(self):
    """train_and_evaluate: the validation metrics, the evaluator's Result, or None (a worker)."""
    params, task = self.params, self.task
    if task is not None and task.type == "worker" and self.latest is None:
      _wait_for_chief(params.model_dir)
    # The stall hook begins and ends the meter's steps; the saving listener
    # ends a step that saves before the checkpoint and its evaluation, for the
    # meter as for the clock, so neither counts evaluation as a training step.
    # Only the chief writes summaries into model_dir.
    count = StepClock()  # This task's own steps (in a cluster the global step counts all tasks').
    hooks = [EstimatorClockHook([self.clock, count]),
             EstimatorStallHook(self.meter, params.model_dir if self.chief else None,
                                every_steps=stall_log_every(params))]
    if self.best and self.best.patience:
      hooks.append(_StopEarly(self.best))
    last = _LastEvaluation()
    outcome = tf.estimator.train_and_evaluate(
        self.estimator,
        tf.estimator.TrainSpec(self.train_input, max_steps=params.train_steps, hooks=hooks,
                               saving_listeners=[_EndStepBeforeSave([self.clock, self.meter])]),
        # Locally, throttle_secs=0 evaluates every checkpoint (their spacing is
        # the schedule); an evaluator task looks for a new one every second.
        tf.estimator.EvalSpec(self.eval_input(), steps=None, throttle_secs=1 if task else 0,
                              start_delay_secs=0,
                              exporters=[last] + ([_KeepBest(self.best)] if self.best else [])))
    if task is None:
      return outcome[0]
    # train_and_evaluate returns nothing on a cluster's tasks.
    if task.type == "evaluator":
      return _evaluator_result(last.metrics, params)
    if not self.chief:
      logging.info("audioclf: %s:%d ran %d training steps", task.type, task.index, count.steps)
      return None
    return self.estimator.evaluate(self.eval_input())

  def _result(self, validation: dict) -> Result:
    params, best = self.params, self.best
    test = (self.estimator.evaluate(self.eval_input("test"), name="test")
            if has_split(self.manifest, "test") else None)
    steps = int(validation["global_step"])
    if self.task is not None and best:
      # What the evaluator task has kept so far: it may still evaluate the last checkpoint.
      best = best_lib.tracker(params, write=False)
    return result(params, steps, validation, test, self.clock, self.meter, best)
