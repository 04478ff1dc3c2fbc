"""What a legacy (Keras 2) checkpoint holds, read with tf.train.load_checkpoint: no Keras 2 needed."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf import compat
from audioclf.model import model_dir as model_dir_lib

VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
LAYER_PREFIX = "layer_with_weights-"
SLOT_MARK = "/.OPTIMIZER_SLOT/optimizer/"
KERAS2_OPTIMIZER_VARIABLES = "optimizer/_variables/"

# Keras 3's name of each slot of Keras 2's legacy optimizers (the Estimator's),
# saved per weight as <weight>/.OPTIMIZER_SLOT/optimizer/<slot>.
PER_WEIGHT_SLOTS = {"m": "momentum", "v": "velocity", "rms": "velocity", "momentum": "momentum"}


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
  """
  path: str
  step: int
  layers: list[dict[str, np.ndarray]]
  slots: Optional[str]
  per_weight: dict[tuple[int, str], dict[str, np.ndarray]]
  ordered: list[np.ndarray]
  unknown_slots: list[str]

  @classmethod
  def read(cls, path: str) -> "LegacyCheckpoint":
    """Reads a checkpoint a legacy engine wrote.

    Raises:
      MigrationError: the checkpoint is not of a Keras 2 model audioclf wrote.
    """
    reader = tf.train.load_checkpoint(path)
    names = [name for name in reader.get_variable_to_shape_map() if name.endswith(VALUE_SUFFIX)]
    if compat.checkpoint_keras_major(names) != 2:
      raise MigrationError(f"{path!r} is not a Keras 2 checkpoint (no {LAYER_PREFIX}<i> keys): "
                           "not a model_dir of the legacy stack")
    try:
      step = model_dir_lib.checkpoint_step(path)
    except model_dir_lib.ModelDirError as e:
      raise MigrationError(str(e)) from e
    layers: dict[int, dict[str, np.ndarray]] = {}
    per_weight: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    ordered: dict[int, np.ndarray] = {}
    unknown = []
    for name in names:
      key = name[:-len(VALUE_SUFFIX)]
      if key.startswith(LAYER_PREFIX):
        layer, _, rest = key[len(LAYER_PREFIX):].partition("/")
        weight, _, slot = rest.partition(SLOT_MARK)
        if not slot:
          layers.setdefault(int(layer), {})[weight] = reader.get_tensor(name)
        elif slot in PER_WEIGHT_SLOTS:
          per_weight.setdefault((int(layer), weight), {})[PER_WEIGHT_SLOTS[slot]] = (
              reader.get_tensor(name))
        else:
          unknown.append(slot)
      elif key.startswith(KERAS2_OPTIMIZER_VARIABLES):
        ordered[int(key[len(KERAS2_OPTIMIZER_VARIABLES):])] = reader.get_tensor(name)
    if sorted(layers) != list(range(len(layers))):
      raise MigrationError(f"{path!r} lacks some {LAYER_PREFIX}<i> of 0..{max(layers)}")
    return cls(path=path, step=step, layers=[layers[i] for i in range(len(layers))],
               slots="per_weight" if per_weight else "ordered" if ordered else None,
               per_weight=per_weight, ordered=[ordered[i] for i in sorted(ordered)],
               unknown_slots=sorted(set(unknown)))


def find_checkpoint(model_dir: str) -> str:
  """The latest checkpoint of a legacy model_dir, also after the folder was moved.

  The Estimator records absolute paths in its `checkpoint` file; a model_dir
  copied elsewhere still names the old ones. The same file name in model_dir
  is then the checkpoint meant.

  Raises:
    MigrationError: model_dir holds no checkpoint.
  """
  state = tf.train.get_checkpoint_state(model_dir)
  if state and state.model_checkpoint_path:
    for path in (state.model_checkpoint_path,
                 os.path.join(model_dir, os.path.basename(state.model_checkpoint_path))):
      if tf.io.gfile.exists(f"{path}.index"):
        return path
  raise MigrationError(f"{model_dir!r} holds no checkpoint (no `checkpoint` file naming an "
                       "existing model.ckpt-<step>.index): nothing to migrate")
