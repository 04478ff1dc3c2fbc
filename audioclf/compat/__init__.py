"""Every difference between the two stacks audioclf runs on, and nothing else.

  legacy   Python 3.11, TensorFlow 2.15, Keras 2.15 (tf.keras), tf.estimator: both engines
  current  Python 3.12 / 3.13, TensorFlow >= 2.20, Keras 3 on its TensorFlow backend:
           everything but the Estimator engine (TF >= 2.16 ships no tf.estimator)

The rest of audioclf imports Keras from here (`from audioclf.compat import keras`)
and calls the small functions below where the two stacks differ, as
keras-tuner's `keras_tuner/backend/` does: no other module asks which Keras it
runs on.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import keras
import tensorflow as tf

from audioclf.params import ParamError

KERAS3: bool = int(keras.__version__.split(".")[0]) >= 3
TF_VERSION: tuple[int, int] = tuple(int(part) for part in tf.__version__.split(".")[:2])
# tf.estimator lives in the tensorflow-estimator package, which stops at TF 2.15;
# model_to_estimator needs Keras 2 as well.
ESTIMATOR: bool = not KERAS3 and importlib.util.find_spec("tensorflow_estimator") is not None

LEGACY_STACK = "legacy"
CURRENT_STACK = "current"
STACK: str = CURRENT_STACK if KERAS3 else LEGACY_STACK
# What a user runs to get the stack they lack; tools/_venv.sh makes both venvs.
HOW_TO_GET = {
    LEGACY_STACK: "the legacy stack (Python 3.11, TensorFlow 2.15, Keras 2): "
                  "AUDIOCLF_STACK=legacy tools/demo.sh creates it in .venv-legacy; "
                  "then run .venv-legacy/bin/python -m audioclf...",
    CURRENT_STACK: "the current stack (Python 3.12 or 3.13, TensorFlow >= 2.20, Keras 3): "
                   "AUDIOCLF_STACK=current tools/demo.sh creates it in .venv; "
                   "then run .venv/bin/python -m audioclf...",
}


class StackError(ParamError):
  """A parameter value that needs the other stack; commands end on it in one line."""


def stack_record() -> dict[str, Any]:
  """This stack as params.json records it: TensorFlow major.minor and the Keras major version."""
  return {"name": STACK, "tensorflow": f"{TF_VERSION[0]}.{TF_VERSION[1]}",
          "keras": int(keras.__version__.split(".")[0])}


def require_estimator() -> None:
  """Raises StackError unless tf.estimator (and model_to_estimator) can run here."""
  if not ESTIMATOR:
    raise StackError(
        f"--engine=estimator needs tf.estimator, which TensorFlow {tf.__version__} with Keras "
        f"{keras.__version__} does not have: it needs {HOW_TO_GET[LEGACY_STACK]}. Here, "
        "--engine=keras trains the same model.")


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
  are called in. Keras 3 also averages each step's logs of
  a multi-worker strategy with strategy.reduce("MEAN", v, axis=0), which
  fails on the scalars they are (keras-team/keras#20585); they are averaged
  without an axis here. Keras 2 needs neither.
  """
  several = strategy.num_replicas_in_sync > 1
  multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
  if not KERAS3 or not (several or multi_worker):
    return
  with strategy.scope():
    model._symbolic_build(data_batch=element_spec)  # pylint: disable=protected-access
    model.optimizer.build(model.trainable_variables)
  model._distribute_strategy = None  # pylint: disable=protected-access
  from keras.src.backend.tensorflow import trainer  # pylint: disable=g-import-not-at-top
  reduce_per_replica = trainer.reduce_per_replica
  if not multi_worker or getattr(reduce_per_replica, "audioclf_multi_worker_mean", False):
    return

  def reduce_scalars_without_axis(values, strategy, reduction):
    if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):  # pylint: disable=protected-access
      return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
    return reduce_per_replica(values, strategy, reduction)

  reduce_scalars_without_axis.audioclf_multi_worker_mean = True
  trainer.reduce_per_replica = reduce_scalars_without_axis


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
  the model's `_train_counter`; Keras 3: the callback's own
  `_global_train_batch`): a resumed run would draw over the first run's curves.
  Both are set to the optimizer's step once training begins.
  """

  def on_train_begin(self, logs=None):
    super().on_train_begin(logs)
    step = int(self.model.optimizer.iterations.numpy())
    if KERAS3:
      self._global_train_batch = step  # pylint: disable=attribute-defined-outside-init
    else:
      counter = getattr(self.model, "_train_counter", None)  # pylint: disable=protected-access
      if counter is not None:
        counter.assign(step)


# Checkpoint keys that hold the global step: Keras fit (both Keras 2's v2
# optimizer and Keras 3 name it `_iterations`), Keras 2's legacy optimizer,
# model_to_estimator.
STEP_KEYS = ("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
             "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
             "estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE")


def tflite_interpreter(model_content: bytes):
  """A TensorFlow Lite interpreter for a model: LiteRT's where installed, else tf.lite's.

  TF 2.21 deprecates tf.lite.Interpreter for LiteRT (ai-edge-litert), which the
  current stack installs; the legacy stack runs TF 2.15's own. Chosen by what
  imports, so a legacy venv with LiteRT added uses it too.
  """
  try:
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
  except ImportError:
    Interpreter = tf.lite.Interpreter  # pylint: disable=invalid-name
  return Interpreter(model_content=model_content)


def checkpoint_keras_major(variable_names) -> int:
  """The Keras major version that wrote a checkpoint of a model, from its variable names.

  Keras 2 tracks a functional model's layers as `layer_with_weights-<i>`,
  Keras 3 as `_operations/<i>`.
  """
  return 2 if any(name.startswith("layer_with_weights-") for name in variable_names) else 3


def trial_gradient_names() -> set:
  """The names in TensorFlow's gradient registry before a tuner trial: see forget_trial_gradients."""
  return set(_gradient_registry())


def forget_trial_gradients(keep: set) -> None:
  """Unregisters the gradient functions a tuner trial's train step registered for good.

  Every trace of Keras' train step (Keras 2 on TF 2.15, and still Keras 3 on
  TF 2.21) differentiates a `tf.custom_gradient`, which in a graph registers
  its gradient function under a new name in TensorFlow's global gradient
  registry and never removes it; that function holds the whole traced train
  step. clear_session cannot reach it, so each trial kept its graphs alive:
  9 to 14 MB a trial for audioclf's small models on TF 2.15 (tensorflow#61791,
  tf-keras#286; tools/bench_tune_memory.py measures it). The registry is only
  read while a graph is differentiated, which a finished trial's graphs never
  are again. Names in `keep` (there before the trial) stay.

  The registry is private API: where a TensorFlow release no longer has it,
  this does nothing.
  """
  registry = _gradient_registry()
  for name in [n for n in registry if n.startswith("CustomGradient-") and n not in keep]:
    del registry[name]


def _gradient_registry() -> dict:
  # pylint: disable-next=g-direct-tensorflow-import,g-import-not-at-top
  from tensorflow.python.framework import ops as tf_ops
  # pylint: disable-next=protected-access
  registry = getattr(getattr(tf_ops, "_gradient_registry", None), "_registry", None)
  return registry if isinstance(registry, dict) else {}


if KERAS3:

  @keras.saving.register_keras_serializable(package="audioclf")
  class BatchNormalization(keras.layers.BatchNormalization):
    """Keras 3's BatchNormalization, trained with TensorFlow's fused kernel where that applies.

    Keras 3 normalizes a training batch with separate ops (tf.nn.moments, then
    tf.nn.batch_normalization), and so does their gradient: on the demo CNN
    that made a CPU training step 1.4x Keras 2's, whose layer calls the fused
    kernel (FusedBatchNormV3 and its one gradient op). Same weights, same
    config, same moving-average rule and the same numbers to float rounding;
    anything the fused kernel does not cover (a mask, several replicas'
    statistics, renorm, other ranks or axes, float16) takes Keras' own path,
    as does inference.
    """

    def call(self, inputs, training=None, mask=None):
      if not (training and self.trainable and self._fusable(inputs, mask)):
        return super().call(inputs, training=training, mask=mask)
      channels = inputs.shape[-1]
      gamma = self.gamma if self.scale else tf.ones([channels])
      beta = self.beta if self.center else tf.zeros([channels])
      outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
          inputs, gamma, beta, epsilon=self.epsilon, data_format="NHWC", is_training=True)
      # The kernel returns the batch variance with Bessel's correction; Keras
      # averages the plain one into its moving variance.
      count = tf.cast(tf.size(inputs) // channels, tf.float32)
      variance *= (count - 1.0) / tf.maximum(count, 1.0)
      self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
      self.moving_variance.assign(
          self.moving_variance * self.momentum + variance * (1.0 - self.momentum))
      return outputs

    def _fusable(self, inputs, mask) -> bool:
      rank = len(inputs.shape)
      return (mask is None and not self.synchronized and not self.renorm and rank == 4
              and self.axis in (-1, rank - 1) and inputs.dtype == tf.float32
              and self.epsilon >= 1.001e-5  # The kernel's floor (cuDNN's).
              and inputs.shape[-1] is not None)

else:
  # Keras 2's layer calls the fused kernel itself.
  BatchNormalization = keras.layers.BatchNormalization
