"""What a legacy (Keras 2) checkpoint holds, read with tf.train.load_checkpoint: no Keras 2 needed."""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from audioclf import compat
from audioclf.model import model_dir as model_dir_lib

VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
LAYER_PREFIX = "layer_with_weights-"
SLOT_MARK = "/.OPTIMIZER_SLOT/optimizer/"
KERAS2_OPTIMIZER_VARIABLES = "optimizer/_variables/"
OPTIMIZER_PREFIX = "optimizer/"
OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"

# Keras 3's name of each slot of Keras 2's legacy optimizers (the Estimator's),
# saved per weight as <weight>/.OPTIMIZER_SLOT/optimizer/<slot>: Adam's m, v
# (vhat with amsgrad), RMSprop's rms (mg centered, momentum with momentum),
# SGD's momentum.
PER_WEIGHT_SLOTS = {"m": "momentum", "v": "velocity", "vhat": "velocity_hat", "rms": "velocity",
                    "mg": "average_gradient", "momentum": "momentum"}


class MigrationError(model_dir_lib.ModelDirError):
  """The model_dirs cannot be migrated as asked; the message says why."""


@dataclasses.dataclass
class LegacyCheckpoint:
  """What a legacy (Keras 2) checkpoint holds, read without Keras 2.

  Attributes:
    path: the checkpoint's prefix.
    step: the global step it was saved at.
    layers: per layer with weights, in model order: weight name -> value.
    slots: "per_weight" (Keras 2's legacy optimizers, the Estimator's: slots
      keyed by weight), "ordered" (Keras 2's optimizers: one list) or
      None (no optimizer state at all).
    per_weight: (layer, weight name) -> {Keras 3 slot name: value}.
    ordered: the Keras 2 optimizer's slot values, in creation order.
    unknown_slots: legacy slot names this module cannot map.
    slot_names: the legacy names of the per-weight slots it holds (m, v, rms...).
    hyperparameters: the legacy optimizer's saved scalars (optimizer/<name>:
      learning_rate, beta_1, rho, momentum, decay...).
    graph_names: per layer with weights, the name Keras 2 gave it in its graph
      (from the object graph; for people to read, never to map by, as it
      depends on what the process built before).
    optimizer_class: the legacy optimizer's name in that graph (its class, unless
      the code named it), or None.
  """
  path: str
  step: int
  layers: list[dict[str, np.ndarray]]
  slots: Optional[str]
  per_weight: dict[tuple[int, str], dict[str, np.ndarray]]
  ordered: list[np.ndarray]
  unknown_slots: list[str]
  slot_names: list[str] = dataclasses.field(default_factory=list)
  hyperparameters: dict[str, float] = dataclasses.field(default_factory=dict)
  graph_names: list[Optional[str]] = dataclasses.field(default_factory=list)
  optimizer_class: Optional[str] = None

  @classmethod
  def read(cls, path: str) -> "LegacyCheckpoint":
    """Reads a checkpoint a legacy engine wrote.

    Raises:
      MigrationError: the checkpoint is not of a Keras 2 model (one line
        saying what it holds instead).
    """
    reader = tf.train.load_checkpoint(path)
    keys = [name[:-len(VALUE_SUFFIX)] for name in reader.get_variable_to_shape_map()
            if name.endswith(VALUE_SUFFIX)]
    if compat.checkpoint_keras_major(keys) != 2:
      raise MigrationError(f"{path!r} {what_it_holds(reader)}, not a Keras 2 model's (no "
                           f"{LAYER_PREFIX}<i> keys): nothing maps it to a Keras 3 model")
    try:
      step = model_dir_lib.checkpoint_step(path)
    except model_dir_lib.ModelDirError as e:
      raise MigrationError(str(e)) from e
    layers = _layer_weights(reader, keys)
    per_weight, slot_names, unknown = _per_weight_slots(reader, keys)
    ordered = _ordered_slots(reader, keys)
    if sorted(layers) != list(range(len(layers))):
      raise MigrationError(f"{path!r} lacks some {LAYER_PREFIX}<i> of 0..{max(layers)}")
    full_names = _graph_full_names(reader)
    return cls(path=path, step=step, layers=[layers[i] for i in range(len(layers))],
               slots="per_weight" if per_weight else "ordered" if ordered else None,
               per_weight=per_weight, ordered=[ordered[i] for i in sorted(ordered)],
               unknown_slots=sorted(set(unknown)), slot_names=sorted(slot_names),
               hyperparameters=_hyperparameters(reader, keys),
               graph_names=[_layer_graph_name(full_names, i, layers[i])
                            for i in range(len(layers))],
               optimizer_class=_optimizer_graph_name(full_names))


def _layer_keys(keys: list[str]) -> Iterator[tuple[str, int, str, str]]:
  """(key, layer, weight, slot) of each layer's key: slot "" for a weight's own value."""
  for key in keys:
    if key.startswith(LAYER_PREFIX):
      layer, _, rest = key[len(LAYER_PREFIX):].partition("/")
      weight, _, slot = rest.partition(SLOT_MARK)
      yield key, int(layer), weight, slot


def _layer_weights(reader, keys: list[str]) -> dict[int, dict[str, np.ndarray]]:
  """Layer number -> {weight name: value}."""
  layers: dict[int, dict[str, np.ndarray]] = {}
  for key, layer, weight, slot in _layer_keys(keys):
    if not slot:
      layers.setdefault(layer, {})[weight] = reader.get_tensor(key + VALUE_SUFFIX)
  return layers


def _per_weight_slots(reader, keys: list[str]
                      ) -> tuple[dict[tuple[int, str], dict[str, np.ndarray]], set[str], list[str]]:
  """The slots saved per weight (Keras 2's legacy optimizers'), as LegacyCheckpoint.per_weight.

  Returns:
    (per_weight, the legacy names of the slots it holds, the legacy names of
    those PER_WEIGHT_SLOTS cannot map).
  """
  per_weight: dict[tuple[int, str], dict[str, np.ndarray]] = {}
  slot_names, unknown = set(), []
  for key, layer, weight, slot in _layer_keys(keys):
    if slot in PER_WEIGHT_SLOTS:
      slot_names.add(slot)
      per_weight.setdefault((layer, weight), {})[PER_WEIGHT_SLOTS[slot]] = (
          reader.get_tensor(key + VALUE_SUFFIX))
    elif slot:
      unknown.append(slot)
  return per_weight, slot_names, unknown


def _ordered_slots(reader, keys: list[str]) -> dict[int, np.ndarray]:
  """Keras 2's optimizers' slots: their position in optimizer._variables -> value."""
  return {int(key[len(KERAS2_OPTIMIZER_VARIABLES):]): reader.get_tensor(key + VALUE_SUFFIX)
          for key in keys if key.startswith(KERAS2_OPTIMIZER_VARIABLES)}


def _hyperparameters(reader, keys: list[str]) -> dict[str, float]:
  """The legacy optimizer's saved scalars (optimizer/<name>), its step left out."""
  hyperparameters = {}
  for key in keys:
    if key.startswith(OPTIMIZER_PREFIX) and "/" not in key[len(OPTIMIZER_PREFIX):]:
      value = reader.get_tensor(key + VALUE_SUFFIX)
      if np.ndim(value) == 0 and key not in ("optimizer/iter", "optimizer/_iterations"):
        hyperparameters[key[len(OPTIMIZER_PREFIX):]] = float(value)
  return hyperparameters


def _graph_full_names(reader) -> dict[str, str]:
  """Checkpoint key (less VALUE_SUFFIX) -> the variable's name in the graph that saved it."""
  if not reader.has_tensor(OBJECT_GRAPH):
    return {}
  graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
      reader.get_tensor(OBJECT_GRAPH))
  return {a.checkpoint_key[:-len(VALUE_SUFFIX)]: a.full_name
          for node in graph.nodes for a in node.attributes
          if a.checkpoint_key.endswith(VALUE_SUFFIX)}


def _layer_graph_name(full_names: dict[str, str], index: int, weights: dict) -> Optional[str]:
  # `conv2d/kernel`, `gru/gru_cell/kernel`: the layer's scope is the first part.
  full = full_names.get(f"{LAYER_PREFIX}{index}/{min(weights)}")
  return full.split("/")[0] if full else None


def _optimizer_graph_name(full_names: dict[str, str]) -> Optional[str]:
  # Keras 2 made the optimizer's variables under training/<its name>/ (`training/RMSprop/rho`).
  for key, full in full_names.items():
    parts = full.split("/")
    if key.startswith(OPTIMIZER_PREFIX) and len(parts) > 2 and parts[0] == "training":
      return parts[1]
  return None


def what_it_holds(reader) -> str:
  """What a checkpoint holds, in words, for a refusal: "is a name-based checkpoint of 4 variables (...)".

  Names with the TF1 optimizers' slot suffixes (`<var>/Adam`, `<var>/Momentum`,
  ...) are counted as slots of their variable, not variables of a model.
  """
  shapes = reader.get_variable_to_shape_map()
  object_based = OBJECT_GRAPH in shapes
  names = sorted(n[:-len(VALUE_SUFFIX)] if n.endswith(VALUE_SUFFIX) else n
                 for n in shapes if n != OBJECT_GRAPH)
  shape_of = {(n[:-len(VALUE_SUFFIX)] if n.endswith(VALUE_SUFFIX) else n): s
              for n, s in shapes.items()}
  slots = {n.rsplit("/", 1)[1].split("_")[0] for n in names
           if "/" in n and n.rsplit("/", 1)[0] in shape_of and shape_of[n]}
  step = [n for n in names if n in ("global_step", "estimator_global_step")]
  variables = [n for n in names if n not in step and shape_of[n]
               and not ("/" in n and n.rsplit("/", 1)[0] in shape_of)]
  shown = ", ".join(f"{n} {list(shape_of[n])}" for n in variables[:6])
  more = f", and {len(variables) - 6} more" if len(variables) > 6 else ""
  extras = [f"TF1 {'/'.join(sorted(slots))} slots"] if slots else []
  extras += step
  return (f"is {'an object-based' if object_based else 'a name-based'} checkpoint of "
          f"{len(variables)} variables ({shown}{more})"
          + (f" with {' and '.join(extras)}" if extras else ""))


def find_checkpoint(model_dir: str) -> str:
  """The latest checkpoint of a legacy model_dir, also after the folder was moved.

  The Estimator records absolute paths in its `checkpoint` file; a model_dir
  copied elsewhere still names the old ones. The same file name in model_dir
  is the checkpoint meant (model_dir.own_latest_checkpoint).

  Raises:
    MigrationError: model_dir holds no checkpoint.
  """
  path = model_dir_lib.own_latest_checkpoint(model_dir)
  if path:
    return path
  raise MigrationError(f"{model_dir!r} holds no checkpoint (no `checkpoint` file naming an "
                       "existing model.ckpt-<step>.index): nothing to migrate")
