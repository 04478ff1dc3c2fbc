"""How training differs between the stacks: optimizers, the learning phase, fit under replicas, TensorBoard, tuner trials."""

from __future__ import annotations

import gc

import keras
import tensorflow as tf

from audioclf.compat import private
from audioclf.compat.stack import KERAS3


def fit_under(model, strategy, element_spec) -> None:
  """Lets Keras 3's fit and evaluate run `model` under a strategy of several replicas.

  Keras 3 (3.15 here) builds the metrics of a model made in a strategy's
  scope from a first batch averaged over the replicas with strategy.reduce,
  which fails where the replicas' batches differ in size (an evaluation's
  last step: "Inputs to operation AddN ... must have the same size") and,
  under MultiWorkerMirroredStrategy, for any nested batch ("Attempt to
  convert a value ... PerReplica"). So the model's metrics, loss and
  optimizer are built here, from `element_spec` (a batch's structure), and
  the model forgets the strategy, whose reduced first batch Keras then never
  asks for; fit and evaluate still run under the strategy whose scope they
  are called in. Keras 3 also averages each step's logs of a multi-worker
  strategy along an axis they lack (keras-team/keras#20585): they are
  averaged without one. Keras 2 needs neither.
  """
  several = strategy.num_replicas_in_sync > 1
  multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
  if not KERAS3 or not (several or multi_worker):
    return
  with strategy.scope():
    private.build_for_strategy(model, element_spec)
  private.forget_strategy(model)
  if multi_worker:
    private.average_multi_worker_logs_without_axis()


def optimizers(for_estimator: bool):
  """The module holding the optimizer classes (Adam, SGD, RMSprop) for an engine.

  model_to_estimator clones the model into a TF1 graph, where only Keras 2's
  `optimizers.legacy` classes work (it would otherwise convert the optimizer
  itself, with a warning). Keras 3 has one family, and no Estimator.
  """
  if for_estimator and not KERAS3:
    return keras.optimizers.legacy
  return keras.optimizers


def is_legacy_optimizer(optimizer) -> bool:
  """Whether `optimizer` is of Keras 2's legacy family (never, on Keras 3)."""
  return not KERAS3 and isinstance(optimizer, keras.optimizers.legacy.Optimizer)


def build_optimizer(model) -> None:
  """Makes the slots of `model`'s optimizer (Adam's moments, ...) now, before fit traces its step.

  Both stacks' optimizers make them on their first step otherwise, inside
  the traced step, and tf.function traces a function again when it made
  variables, which costs a whole second trace of the step. Once
  only: a built Keras 3 optimizer (a subclass of a team's own may not guard
  its build) is left as it is, and Keras 2's optimizers, which say nothing
  of it, return from a second build themselves. Keras 2's legacy family (a
  builder's own, under --optimizer=model) makes its slots its own way, and
  has no build.
  """
  optimizer = model.optimizer
  if not is_legacy_optimizer(optimizer) and not getattr(optimizer, "built", False):
    optimizer.build(model.trainable_variables)


def learning_phase():
  """What a layer called with training=None should do: the graph-mode learning phase, or False.

  Keras 2's graph-mode model (the clone model_to_estimator makes) leaves
  `training` unset and says it through the learning phase instead, as Dropout
  reads it. Keras 3 passes training down from fit, evaluate and predict itself,
  and has no learning phase: None there means a plain call, inference.
  """
  if KERAS3:
    return False
  return keras.backend.learning_phase()


class TensorBoard(keras.callbacks.TensorBoard):
  """Keras' TensorBoard callback, its batch summaries stepped by the global step on resume.

  fit restarts the batch counter the summaries are stepped by at 0 (Keras 2:
  the model's; Keras 3: the callback's own): a resumed run would draw over
  the first run's curves. It is set to the optimizer's step once training begins.
  """

  def on_train_begin(self, logs=None):
    super().on_train_begin(logs)
    private.set_summary_step(self, self.model, int(self.model.optimizer.iterations.numpy()))


def trial_gradient_names() -> set:
  """The names in TensorFlow's gradient registry before a tuner trial: see forget_trial_gradients."""
  return set(private.gradient_registry())


def forget_trial_gradients(keep: set) -> None:
  """Unregisters the gradient functions a tuner trial's train step registered for good.

  Every trace of Keras' train step (Keras 2 on TF 2.15, and still Keras 3 on
  TF 2.21) differentiates a `tf.custom_gradient`, which in a graph registers
  its gradient function under a new name in TensorFlow's global gradient
  registry and never removes it; that function holds the whole traced train
  step. clear_session cannot reach it, so each trial would keep its graphs alive
  (tensorflow#61791, tf-keras#286; tools/bench_tune_memory.py measures it). The registry is only
  read while a graph is differentiated, which a finished trial's graphs never
  are again. Names in `keep` (there before the trial) stay.

  The registry is private API: where a TensorFlow release no longer has it,
  this does nothing.
  """
  registry = private.gradient_registry()
  for name in [n for n in registry if n.startswith("CustomGradient-") and n not in keep]:
    del registry[name]


def clear_session() -> None:
  """Keras' global state (graph, layer-name counters) dropped, and the garbage it leaves collected.

  Keras 3's clear_session collects it itself (free_memory); Keras 2's does not.
  """
  keras.backend.clear_session()
  if not KERAS3:
    gc.collect()
