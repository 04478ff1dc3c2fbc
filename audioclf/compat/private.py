"""Every use of a private TensorFlow, Keras or keras-tuner symbol in audioclf, and nowhere else.

Each is a small function here, listed in SYMBOLS with the stacks it applies
to, why no public API does the job, and the upstream issue where there is one.
tests/test_compat.py imports every listed symbol on the stack it applies to,
so a release that moves one fails that test by the symbol's name, not some
distant behaviour. Where a symbol is gone at run time, each function falls
back to the public way (slower, or without the fix), never fails a run.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
from typing import Any, Callable, Optional

import tensorflow as tf

from audioclf.compat.stack import CURRENT_STACK, KERAS3, LEGACY_STACK


@dataclasses.dataclass(frozen=True)
class Symbol:
  module: str  # Where it lives.
  name: str  # Its attribute path in the module: "Model._symbolic_build".
  stacks: tuple[str, ...]  # Where audioclf uses it.
  why: str  # What audioclf needs it for, and why no public API serves.
  upstream: str = ""  # The issue that would make it unnecessary.
  # For an attribute an object gets when made, not its class: makes one and returns it.
  probe: Optional[Callable[[], Any]] = None


def _tensorboard_batch_counter():
  import tempfile  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  return vars(keras.callbacks.TensorBoard(tempfile.mkdtemp()))["_global_train_batch"]


def _iterator_resource():
  return vars(iter(tf.data.Dataset.range(1)))["_iterator_resource"]


def _model_train_counter():
  import keras  # pylint: disable=g-import-not-at-top
  model = keras.Sequential([keras.layers.Dense(1, input_shape=(1,))])
  return vars(model)["_train_counter"]


def _canned_model_fn():
  import tempfile  # pylint: disable=g-import-not-at-top
  estimator = tf.estimator.DNNClassifier([2], [tf.feature_column.numeric_column("x")],
                                         n_classes=3, model_dir=tempfile.mkdtemp())
  return vars(estimator)["_model_fn"]


def _estimator_warm_start():
  import tempfile  # pylint: disable=g-import-not-at-top
  return vars(tf.estimator.Estimator(lambda features, labels, mode: None,
                                     model_dir=tempfile.mkdtemp()))["_warm_start_settings"]


def _saver_object_restore():
  with tf.Graph().as_default():
    return vars(tf.compat.v1.train.Saver([tf.compat.v1.Variable(0)]))["_object_restore_saver"]


BOTH = (LEGACY_STACK, CURRENT_STACK)
SYMBOLS = (
    Symbol("keras", "Model._symbolic_build", (CURRENT_STACK,),
           "build a model's metrics from a batch spec before fit under several replicas"),
    Symbol("keras.src.backend.tensorflow.trainer", "reduce_per_replica", (CURRENT_STACK,),
           "average a multi-worker step's scalar logs without an axis", "keras-team/keras#20585"),
    Symbol("keras.src.backend.tensorflow.trainer", "_collective_all_reduce_multi_worker",
           (CURRENT_STACK,), "tell a multi-worker strategy in that reduction",
           "keras-team/keras#20585"),
    Symbol("keras.callbacks", "TensorBoard()._global_train_batch", (CURRENT_STACK,),
           "step a resumed run's batch summaries by the global step",
           probe=_tensorboard_batch_counter),
    Symbol("keras", "Model()._train_counter", (LEGACY_STACK,),
           "the same on Keras 2, where the model keeps the counter", probe=_model_train_counter),
    Symbol("tensorflow.python.framework.ops", "_gradient_registry._registry", BOTH,
           "forget a tuner trial's traced gradients (9-14 MB a trial otherwise)",
           "tensorflow#61791, tf-keras#286"),
    Symbol("tensorflow.python.data.ops.map_op", "_MapDataset", BOTH,
           "run the stall probe's three ops inline (use_inter_op_parallelism=False): half its "
           "cost"),
    Symbol("keras_tuner.oracles", "HyperbandOracle._get_num_brackets", BOTH,
           "size Hyperband's sweeps to a budget of full trials"),
    Symbol("keras_tuner.oracles", "HyperbandOracle._get_num_rounds", BOTH, "the same"),
    Symbol("keras_tuner.oracles", "HyperbandOracle._get_epochs", BOTH, "the same"),
    Symbol("keras_tuner.oracles", "HyperbandOracle._get_size", BOTH, "the same"),
    Symbol("keras_tuner.src.utils", "save_json", BOTH,
           "write the search's state (oracle.json, trial.json) whole or not at all: keras-tuner "
           "truncates the file first, so a search killed right then left an empty oracle.json "
           "that its rerun could not read"),
    Symbol("tensorflow.python.data.ops.iterator_ops", "OwnedIterator", BOTH,
           "find the live tf.data iterators at exit (data.exit_guard)"),
    Symbol("tensorflow.python.data.ops.iterator_ops", "OwnedIterator()._iterator_resource", BOTH,
           "release an iterator's handle while every thread can still run Python",
           probe=_iterator_resource),
    Symbol("tensorflow.data.experimental.service", "DispatchServer._num_workers", BOTH,
           "the dispatcher's status line: how many workers registered"),
    Symbol("tensorflow.data.experimental.service", "WorkerServer._num_tasks", BOTH,
           "the worker's status line: how many tasks it runs"),
    Symbol("tensorflow.estimator", "DNNClassifier()._model_fn", (LEGACY_STACK,),
           "read a canned Estimator's constructor arguments (migrate --estimator), which it "
           "keeps only in the model_fn it made of them", probe=_canned_model_fn),
    # The Estimator's training graph of a head view (estimator_head_step): model_to_estimator's
    # own steps, which it keeps inside the model_fn it makes; tf.estimator ends at TF 2.15.
    Symbol("tensorflow_estimator.python.estimator.keras_lib", "_clone_and_build_model",
           (LEGACY_STACK,), "clone the compiled model into the Estimator's graph as "
           "model_to_estimator does, so its head view trains the very variables it saves"),
    Symbol("keras.src.engine.training_v1", "Model._make_train_function", (LEGACY_STACK,),
           "the head view's training step in that graph (its total_loss and the function's "
           "updates_op), as model_to_estimator's model_fn takes the model's"),
    Symbol("keras.src.backend", "GraphExecutionFunction", (LEGACY_STACK,),
           "the same: the class whose updates_op is the step"),
    Symbol("keras", "Model._track_trackable", (LEGACY_STACK,),
           "name the global step estimator_global_step in the checkpoint, as model_to_estimator"),
    Symbol("tensorflow", "compat.v2.__internal__.tracking.ObjectGraphView", (LEGACY_STACK,),
           "save the head's training graph in the object-based format of model_to_estimator, "
           "keyed by the full model"),
    Symbol("tensorflow.python.checkpoint.checkpoint", "frozen_saver", (LEGACY_STACK,),
           "the same, for a restore from a checkpoint of other names"),
    Symbol("tensorflow.compat.v1.train", "Saver()._object_restore_saver", (LEGACY_STACK,),
           "the same", probe=_saver_object_restore),
    Symbol("tensorflow.estimator", "Estimator()._warm_start_settings", (LEGACY_STACK,),
           "warm-start the head's Estimator from model_to_estimator's first checkpoint (the "
           "eager model's weights), as model_to_estimator's own Estimator does",
           probe=_estimator_warm_start),
)


def resolve(symbol: Symbol) -> Any:
  """The symbol itself; AttributeError, KeyError or ImportError naming it where it is gone."""
  if symbol.probe is not None:
    return symbol.probe()
  value = importlib.import_module(symbol.module)
  for part in symbol.name.split("."):
    value = getattr(value, part)
  return value


# --- A canned Estimator's constructor arguments (migration.legacy_estimator.describe).


def canned_arguments(estimator) -> Optional[dict[str, Any]]:
  """The arguments a canned Estimator was made with, by name; None where its model_fn hides them.

  The canned classes keep them nowhere but in the closure of the model_fn
  they make (hidden_units, feature_columns, activation_fn, optimizer, head...).
  """
  import inspect  # pylint: disable=g-import-not-at-top
  model_fn = vars(estimator).get("_model_fn")
  return inspect.getclosurevars(model_fn).nonlocals if callable(model_fn) else None


# --- The Estimator's training graph of a head view (embeddings.estimator).


def estimator_head_step(model, optimizer_config: dict, head_of: Callable, features: dict,
                        labels):
  """(loss, train op, scaffold) of model_to_estimator's training graph, its step a head's.

  As model_to_estimator's model_fn does, `model` (compiled) is cloned on
  `features` and `labels`, its optimizer's step the global step, and saved
  through an object-based saver rooted at the clone. Then `head_of(clone)`
  (a Keras model of the clone's layers, built on its own input tensors) is
  compiled with the clone's optimizer and loss, and its step is the one
  returned: the optimizer's slots are those of the clone's variables, so
  the checkpoints hold exactly what a step of the clone would save.
  optimizer_config is model.optimizer.get_config(), read eagerly (as
  model_to_estimator does: in the graph its hyperparameters' variables
  would belong to another). No public way serves, and none is fallen back
  to: tf.estimator ends at TF 2.15, where these stay where they are.
  """
  # pylint: disable=protected-access,g-import-not-at-top
  from tensorflow.python.checkpoint import checkpoint as trackable_util
  from tensorflow_estimator.python.estimator import keras_lib
  clone = keras_lib._clone_and_build_model(tf.estimator.ModeKeys.TRAIN, model, None, features,
                                           labels, optimizer_config)
  head = head_of(clone)
  head.compile(optimizer=clone.optimizer, loss=clone.loss, target_tensors=[labels])
  head._make_train_function()
  # After the step: its optimizer slots are in the object graph saved.
  clone._track_trackable(tf.compat.v1.train.get_global_step(), "estimator_global_step")
  var_list = tf.compat.v2.__internal__.tracking.ObjectGraphView(clone).frozen_saveable_objects()
  saver = tf.compat.v1.train.Saver(var_list=var_list, sharded=True)
  saver._object_restore_saver = trackable_util.frozen_saver(clone)
  step = head.train_function.updates_op
  # pylint: enable=protected-access,g-import-not-at-top
  return head.total_loss, step, tf.compat.v1.train.Scaffold(saver=saver)


def warm_start_settings(estimator):
  """What `estimator` warm-starts from (model_to_estimator's: the Keras model's first weights)."""
  return vars(estimator)["_warm_start_settings"]


# --- Keras 3 under several replicas (compat.training.fit_under).


def build_for_strategy(model, element_spec) -> None:
  """Builds `model`'s metrics, loss and optimizer from a batch spec, and unties it from its strategy.

  Keras 3 would build them from a first batch averaged over the replicas,
  which fails on uneven per-replica batches; see compat.training.fit_under.
  """
  model._symbolic_build(data_batch=element_spec)  # pylint: disable=protected-access
  model.optimizer.build(model.trainable_variables)


def forget_strategy(model) -> None:
  model._distribute_strategy = None  # pylint: disable=protected-access


def average_multi_worker_logs_without_axis() -> None:
  """Patches Keras 3's per-replica reduction of a multi-worker step's logs to average scalars.

  Keras 3 reduces them with strategy.reduce("MEAN", v, axis=0), which fails on
  the scalars they are (keras-team/keras#20585). Once per process.
  """
  from keras.src.backend.tensorflow import trainer  # pylint: disable=g-import-not-at-top
  reduce_per_replica = trainer.reduce_per_replica
  if getattr(reduce_per_replica, "audioclf_multi_worker_mean", False):
    return

  def reduce_scalars_without_axis(values, strategy, reduction):
    if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):  # pylint: disable=protected-access
      return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
    return reduce_per_replica(values, strategy, reduction)

  reduce_scalars_without_axis.audioclf_multi_worker_mean = True
  trainer.reduce_per_replica = reduce_scalars_without_axis


# --- TensorBoard on resume (compat.training.TensorBoard).


def set_summary_step(callback, model, step: int) -> None:
  """Steps the batch summaries of `callback` (fit's TensorBoard) from the global step `step`."""
  if KERAS3:
    callback._global_train_batch = step  # pylint: disable=protected-access
  else:
    counter = getattr(model, "_train_counter", None)  # pylint: disable=protected-access
    if counter is not None:
      counter.assign(step)


# --- TensorFlow's gradient registry (compat.training.forget_trial_gradients).


def gradient_registry() -> dict:
  """TensorFlow's global registry of gradient functions; {} where it is gone."""
  # pylint: disable-next=g-direct-tensorflow-import,g-import-not-at-top
  from tensorflow.python.framework import ops as tf_ops
  # pylint: disable-next=protected-access
  registry = getattr(getattr(tf_ops, "_gradient_registry", None), "_registry", None)
  return registry if isinstance(registry, dict) else {}


# --- tf.data (engines.stall).


def inline_map(dataset: tf.data.Dataset, fn: Callable) -> tf.data.Dataset:
  """dataset.map(fn), its ops run in the calling thread rather than handed to the op pool.

  The public map sends every op of `fn` through the inter-op thread pool: for
  the stall probe's three tiny ops that doubles its cost. TF exposes the switch only on its
  private map class; where that is gone, the public map is used.
  """
  try:
    from tensorflow.python.data.ops import map_op  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
    return map_op._MapDataset(dataset, fn, use_inter_op_parallelism=False)  # pylint: disable=protected-access
  except (ImportError, AttributeError, TypeError):
    return dataset.map(fn)


def release_live_iterators() -> int:
  """Deletes the resource of every live eager tf.data iterator; returns how many (data.exit_guard).

  An iterator's resource is its handle tensor: dropping the last reference
  deletes it, which stops the iterator's threads and waits for its calls in
  flight (with the GIL free to serve them). The Python objects stay; using
  one afterwards fails, which is moot at exit. TF names no public way to do
  it; reached through vars(), so a release that renames it closes nothing
  rather than fails.
  """
  import gc  # pylint: disable=g-import-not-at-top
  try:
    from tensorflow.python.data.ops import iterator_ops  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
  except ImportError:
    return 0
  closed = 0
  objects = gc.get_objects()
  # isinstance on each would go through ABCMeta's check: the iterator types once each, then a set
  # lookup per object.
  kinds = {kind for kind in set(map(type, objects))
           if issubclass(kind, iterator_ops.OwnedIterator)}
  for obj in objects:
    # pylint: disable-next=unidiomatic-typecheck
    if type(obj) in kinds and "_iterator_resource" in vars(obj):
      del obj._iterator_resource  # pylint: disable=protected-access
      closed += 1
  return closed


# --- keras-tuner (tuning.tuners).


def hyperband_schedule(oracle) -> list[tuple[int, int, int]]:
  """(trials, epochs, epochs of the round before) of every round of every Hyperband bracket."""
  # pylint: disable=protected-access
  schedule = []
  for bracket in range(oracle._get_num_brackets()):
    for rnd in range(oracle._get_num_rounds(bracket)):
      previous = oracle._get_epochs(bracket, rnd - 1) if rnd else 0
      schedule.append((oracle._get_size(bracket, rnd), oracle._get_epochs(bracket, rnd), previous))
  # pylint: enable=protected-access
  return schedule


def write_search_state_with(write: Callable[[str, bytes], None]) -> None:
  """Makes keras-tuner write each JSON file of a search through `write(path, data)`.

  keras-tuner opens the file for writing (truncating it) and then writes: a
  kill in between leaves an empty oracle.json or trial.json, and the rerun
  that should resume the search fails on it (JSONDecodeError). Given a
  writer that puts a whole file in place or none (audioclf.files.atomic_write),
  a kill leaves the last whole state. Once per process.
  """
  from keras_tuner.src import utils  # pylint: disable=g-import-not-at-top
  if getattr(utils.save_json, "audioclf_writer", None) is write:
    return

  def save_json(path, obj):
    text = json.dumps(obj)
    write(path, text.encode("utf-8"))
    return text

  save_json.audioclf_writer = write
  utils.save_json = save_json


# --- tf.data service servers (commands.service's status lines).


def server_load(server) -> Optional[int]:
  """A dispatcher's registered workers, or a worker's tasks; None where TF no longer says."""
  count = getattr(server, "_num_workers", None) or getattr(server, "_num_tasks", None)
  try:
    return int(count()) if count is not None else None
  except Exception:  # pylint: disable=broad-except
    return None


@functools.cache
def available() -> dict[str, bool]:
  """Which SYMBOLS this stack has (for a report; the test imports each itself)."""
  found = {}
  for symbol in SYMBOLS:
    try:
      resolve(symbol)
      found[f"{symbol.module}.{symbol.name}"] = True
    except (ImportError, AttributeError, KeyError):
      found[f"{symbol.module}.{symbol.name}"] = False
  return found
