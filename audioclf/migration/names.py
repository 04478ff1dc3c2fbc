"""What a name-based checkpoint holds (a model_fn's or a canned Estimator's), read with tf.train.load_checkpoint.

An Estimator that built no Keras model saves its variables by graph name with
the TF1 Saver: `dense/kernel`, `dnn/hiddenlayer_0/kernel`, `global_step`, and
its optimizer's slots beside them, in one of two layouts:

  TF1 optimizers (tf.compat.v1.train.*)     <variable>/Adam, <variable>/Adam_1 (m, v),
                                            beta1_power, beta2_power; <variable>/Momentum;
                                            <variable>/Adagrad; <variable>/RMSProp, _1 (ms, mom)
  Keras 2 optimizers in a graph (the        training/<Optimizer>/<variable>/<slot> (m, v,
  canned Estimators)                        accumulator, rms, momentum...) and
                                            training/<Optimizer>/<hyperparameter>
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.migration.checkpoint import OBJECT_GRAPH, MigrationError

STEP = "global_step"
KERAS_PREFIX = "training/"
# A TF1 optimizer's slot suffixes: the optimizer, and Keras 3's name of the slot.
TF1_SLOTS = {"Adam": ("Adam", "momentum"), "Adam_1": ("Adam", "velocity"),
             "Momentum": ("Momentum", "momentum"), "Adagrad": ("Adagrad", "accumulator"),
             "RMSProp": ("RMSProp", "velocity"), "RMSProp_1": ("RMSProp", "momentum"),
             "Ftrl": ("Ftrl", "accumulator"), "Ftrl_1": ("Ftrl", "linear")}
CENTERED_RMSPROP = {"RMSProp_1": ("RMSProp", "average_gradient"),
                    "RMSProp_2": ("RMSProp", "momentum")}
# Keras 2's slot names, as Keras 3 names the same state.
KERAS2_SLOTS = {"m": "momentum", "v": "velocity", "vhat": "velocity_hat", "rms": "velocity",
                "mg": "average_gradient", "momentum": "momentum", "accumulator": "accumulator",
                "linear": "linear"}
# TF1 Adam's running powers of beta_1 and beta_2 (the step in another form).
BETA_POWERS = ("beta1_power", "beta2_power")


def is_name_based(path: str) -> bool:
  """Whether the checkpoint is a TF1 Saver's (no object graph): a model_fn's or canned Estimator's."""
  return OBJECT_GRAPH not in tf.train.load_checkpoint(path).get_variable_to_shape_map()


@dataclasses.dataclass
class NameCheckpoint:
  """A name-based checkpoint's model variables, step and optimizer state.

  Attributes:
    path: the checkpoint's prefix.
    step: global_step, or None.
    variables: the model's variables (weights and batch norm's moving
      statistics), name -> value, in name order.
    slots: variable name -> {Keras 3 slot name: value}.
    optimizer: the optimizer whose slots it holds ("Adam", "Momentum",
      "Adagrad", "RMSProp", "Ftrl" of TF1; "Adagrad", "Adam"... of Keras 2),
      or None.
    keras_optimizer: True for Keras 2's layout (training/<Optimizer>/...),
      False for TF1's.
    hyperparameters: Keras 2's saved scalars (learning_rate, decay...) and
      TF1 Adam's beta powers.
    unknown: what is neither, in words (another optimizer's slots, a slot of
      an optimizer audioclf does not know).
  """
  path: str
  step: Optional[int]
  variables: dict[str, np.ndarray]
  slots: dict[str, dict[str, np.ndarray]]
  optimizer: Optional[str]
  keras_optimizer: bool
  hyperparameters: dict[str, float]
  unknown: list[str]

  @classmethod
  def read(cls, path: str) -> "NameCheckpoint":
    """Reads a TF1 Saver's checkpoint.

    Raises:
      MigrationError: several optimizers' slots, or no variables.
    """
    reader = tf.train.load_checkpoint(path)
    names = sorted(reader.get_variable_to_shape_map())
    value = reader.get_tensor
    keras_slots, hyper, optimizers, rest = _keras_layout(names, value)
    slots: dict[str, dict[str, np.ndarray]] = {}
    for variable, slot in keras_slots:
      slots.setdefault(variable, {})[KERAS2_SLOTS.get(slot, slot)] = value(
          f"{KERAS_PREFIX}{optimizers[0]}/{variable}/{slot}")
    variables, unknown = {}, []
    # Centered, TF1's RMSProp makes mg before momentum: <v>/RMSProp_1 is mg, _2 the momentum.
    tf1_slots = dict(TF1_SLOTS, **(CENTERED_RMSPROP if any(
        n.endswith("/RMSProp_2") for n in rest) else {}))
    for name in rest:
      parent, _, suffix = name.rpartition("/")
      if parent in rest and suffix in tf1_slots:
        optimizers.append(tf1_slots[suffix][0])
        slots.setdefault(parent, {})[tf1_slots[suffix][1]] = value(name)
      elif name.rpartition("/")[2] in BETA_POWERS:
        hyper[name.rpartition("/")[2]] = float(value(name))
      elif name == STEP:
        continue
      elif parent in rest:
        unknown.append(f"{name} (a slot of no optimizer audioclf knows)")
      else:
        variables[name] = value(name)
    if len(set(optimizers)) > 1:
      unknown += [f"{o}'s slots (Keras 3 trains a model with one optimizer)"
                  for o in sorted(set(optimizers))[1:]]
    if not variables:
      raise MigrationError(f"{path!r} holds no model variables")
    return cls(path=path, step=int(value(STEP)) if STEP in names else None, variables=variables,
               slots=slots, optimizer=optimizers[0] if optimizers else None,
               keras_optimizer=bool(keras_slots or hyper and not set(hyper) <= set(BETA_POWERS)),
               hyperparameters=hyper, unknown=unknown)

  def shape(self, name: str) -> list[int]:
    return list(self.variables[name].shape)


def _keras_layout(names: list[str], value):
  """Keras 2's training/<Optimizer>/ names: (variable, slot) pairs, hyperparameters, optimizers, the rest.

  Where a combined Estimator has two optimizers, the first's slots are read
  and the other's are named, `training/<it>/...`, among the optimizers.
  """
  rest = [n for n in names if not n.startswith(KERAS_PREFIX)]
  own = set(rest)
  optimizers = sorted({n[len(KERAS_PREFIX):].split("/")[0] for n in names
                       if n.startswith(KERAS_PREFIX)})
  pairs, hyper = [], {}
  for name in names:
    if not name.startswith(KERAS_PREFIX):
      continue
    optimizer, _, below = name[len(KERAS_PREFIX):].partition("/")
    variable, _, slot = below.rpartition("/")
    if optimizer != optimizers[0]:
      continue
    if variable in own:
      pairs.append((variable, slot))
    elif "/" not in below and below != "iter":
      hyper[below] = float(value(name))
  return pairs, hyper, [f"{KERAS_PREFIX}{o}" if i else o for i, o in enumerate(optimizers)], rest
