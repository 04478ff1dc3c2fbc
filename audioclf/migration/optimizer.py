"""The optimizer's step and slots, from a legacy checkpoint into Keras 3's optimizer."""

from __future__ import annotations

from typing import Any

import numpy as np

from audioclf.migration.checkpoint import LegacyCheckpoint, MigrationError

# How Keras 2's optimizers lay their slots out in optimizer._variables (after
# the step): Adam makes m and v weight by weight, RMSprop one velocity per
# weight, SGD one momentum per weight. Keras 2.15's adam.py, rmsprop.py and
# sgd.py `build`; audioclf's optimizers have no amsgrad or centering, so these
# are all there is.
ORDERED_SLOTS = {"adam": ("momentum", "velocity"), "rmsprop": ("velocity",), "sgd": ("momentum",)}
# Slots Keras 2 keeps whose value the next step never reads where Keras 3 makes
# none: SGD without momentum stores its last step in m, and multiplies it by 0.
UNREAD_SLOTS = {("sgd", "momentum")}
_SlotValues = dict[tuple[str, str], np.ndarray]  # (Keras 3 name, slot) -> value.


def assign_optimizer_state(model, legacy: LegacyCheckpoint, names: dict[int, tuple[int, str]],
                           optimizer_name: str, slots: bool = True,
                           why_fresh: str = "--nocarry_optimizer_state") -> list[str]:
  """Sets the optimizer's step and, where they map, its slots from `legacy`.

  Args:
    model: the compiled Keras 3 model, its weights assigned by assign_weights.
    legacy: the checkpoint.
    names: the alignment's names (assign_weights); a weight that has none
      (left as built) keeps fresh slots.
    optimizer_name: params.optimizer ("adam", "rmsprop", "sgd"), or the
      lower-case class name of a builder's optimizer.
    slots: False leaves every slot as a new optimizer starts it (zeros).
    why_fresh: why, when slots is False, as the returned sentence says.

  Returns:
    What was not carried, one sentence each; empty when all of it was.

  Raises:
    MigrationError: a slot whose shape differs from its weight's.
  """
  optimizer = model.optimizer
  optimizer.build(model.trainable_variables)
  optimizer.iterations.assign(legacy.step)
  if not slots:
    return [f"the optimizer's slots ({why_fresh})"]
  # Keyed by their names, as slot_name spells them.
  slot_vars = {v.name: v for v in optimizer.variables
               if v is not optimizer.iterations and v.name != "learning_rate"}
  values, missing = _legacy_slot_values(model, legacy, names, optimizer_name)
  if legacy.unknown_slots:
    missing.append(f"legacy slots {legacy.unknown_slots} have no Keras 3 {optimizer_name} "
                   "counterpart")
  missing += _assign_slots(slot_vars, values, optimizer_name, legacy.path)
  fresh = sorted(set(slot_vars) - {name for name, _ in values})
  if fresh and not missing:
    missing.append(f"{len(fresh)} of Keras 3's {len(slot_vars)} {optimizer_name} state "
                   f"variables have no value in the checkpoint (e.g. {fresh[0]}); they start fresh")
  return missing


def slot_name(variable, slot: str) -> str:
  """How add_variable_from_reference names a weight's slot: `<weight path, _ for />_<slot>`."""
  return f"{variable.path.replace('/', '_')}_{slot}"


def _legacy_slot_values(model, legacy: LegacyCheckpoint, names: dict[int, tuple[int, str]],
                        optimizer_name: str) -> tuple[_SlotValues, list[str]]:
  """The legacy slots' values by (Keras 3 name, slot); why there are none, where they do not fit."""
  variables = model.trainable_variables
  if legacy.slots == "per_weight":
    return {(slot_name(variable, slot), slot): value for variable in variables
            for slot, value in legacy.per_weight.get(names.get(id(variable)), {}).items()}, []
  if legacy.slots != "ordered":
    return {}, []
  layout = ORDERED_SLOTS.get(optimizer_name)
  if layout is None or len(legacy.ordered) != len(variables) * len(layout):
    return {}, [f"the Keras 2 {optimizer_name} optimizer's {len(legacy.ordered)} "
                f"state variables do not fit {len(variables)} trainable weights"]
  # Adam's build makes m and v weight by weight (interleaved); a single slot
  # (RMSprop's velocity) is one per weight either way.
  return {(slot_name(variable, slot), slot): legacy.ordered[j * len(layout) + k]
          for j, variable in enumerate(variables) for k, slot in enumerate(layout)}, []


def _assign_slots(slot_vars: dict, values: _SlotValues, optimizer_name: str,
                  path: str) -> list[str]:
  """Assigns each value to its Keras 3 slot variable; returns a sentence for each that has none.

  Raises:
    MigrationError: a value whose shape differs from its slot's.
  """
  missing = []
  for (name, slot), value in values.items():
    variable = slot_vars.get(name)
    if variable is None and (optimizer_name, slot) in UNREAD_SLOTS:
      continue
    if variable is None:
      missing.append(f"the legacy slot for {name} has no place in Keras 3's {optimizer_name}")
    elif tuple(variable.shape) != value.shape:
      raise MigrationError(f"{path!r}: optimizer slot {name} is {list(value.shape)}, the "
                           f"model's {list(variable.shape)}: another architecture")
    else:
      variable.assign(value)
  return missing


# The Keras 3 optimizers whose updates continue Keras 2's legacy ones (the
# Estimator's) from carried slots, and the legacy slots each may hold. Checked
# on tests/fixtures/foreign: Adam and SGD (momentum) step exactly alike;
# RMSprop with the epsilon rule of `keras3_arguments`.
CARRIED_SLOTS = {"Adam": ("m", "v", "vhat"), "RMSprop": ("rms", "mg", "momentum"),
                 "SGD": ("momentum",)}


def keras3_arguments(optimizer, legacy: LegacyCheckpoint) -> tuple[dict[str, Any], list[str]]:
  """The builder's Keras 3 optimizer's arguments that must change to continue the legacy run, and why.

  Keras 2's legacy RMSprop without momentum divides by sqrt(rms) + eps,
  Keras 3's by sqrt(rms + eps), for which an rms near eps takes a step
  several times smaller (1.43e-5 after one step on the frames_gru fixture).
  Keras 3 with eps**2 divides by sqrt(rms + eps**2), equal to sqrt(rms) + eps
  where rms >> eps**2 (to eps / sqrt(rms)) and where rms << eps**2, so
  within 1.8e-7 of the Estimator's next step there. With momentum (TF's
  ApplyRMSProp kernel) legacy RMSprop already takes Keras 3's form.

  Args:
    optimizer: the builder's compiled optimizer.
    legacy: the checkpoint (its momentum hyperparameter says which form ran).

  Returns:
    (argument -> new value, one sentence per change).
  """
  if type(optimizer).__name__ != "RMSprop":
    return {}, []
  config = optimizer.get_config()
  momentum = legacy.hyperparameters.get("momentum", config.get("momentum", 0.0))
  if momentum:
    return {}, []
  epsilon = float(config["epsilon"])
  squared = float(f"{epsilon ** 2:.7g}")  # 1e-14, not 9.999999999999998e-15, in the config.
  return {"epsilon": squared}, [
      f"RMSprop's epsilon {epsilon:g} -> {squared:g}: Keras 2's legacy RMSprop (momentum 0) "
      "divides by sqrt(rms) + epsilon, Keras 3's by sqrt(rms + epsilon); with epsilon squared "
      "Keras 3 takes the legacy steps"]


def hyperparameter_differences(optimizer, legacy: LegacyCheckpoint) -> list[str]:
  """Where the checkpoint's saved hyperparameters differ from the builder's optimizer's, in words.

  The builder's values are the ones used; Keras 2's `decay` (lr / (1 + decay *
  step)) has no Keras 3 argument, so a nonzero one is not carried.
  """
  config, out = optimizer.get_config(), []
  for name, value in sorted(legacy.hyperparameters.items()):
    if name == "decay":
      if value:
        out.append(f"Keras 2's decay {value:g} (learning rate / (1 + decay * step)): Keras 3 "
                   "has no such argument; give the builder a LearningRateSchedule")
    elif name not in config:
      out.append(f"the legacy optimizer's {name} {value:g}: {type(optimizer).__name__} has no "
                 "such argument")
    elif isinstance(config[name], (int, float)) and not np.isclose(
        float(config[name]), value, rtol=1e-6, atol=0):
      out.append(f"{name}: the checkpoint's {value:g}, the builder's {float(config[name]):g} "
                 "(the builder's is used)")
  return out


def carry_builders_optimizer(model, legacy: LegacyCheckpoint, names: dict[int, tuple[int, str]],
                             slots: bool = True) -> tuple[list[str], bool]:
  """Sets the step and, where they map, the slots of a builder's optimizer (`model.optimizer`).

  Args:
    model: the compiled Keras 3 model, its weights assigned.
    legacy: the checkpoint.
    names: the alignment's names.
    slots: False leaves them fresh (--nocarry_optimizer_state).

  Returns:
    (what was not carried, one sentence each; whether any slot was carried).
  """
  kind = type(model.optimizer).__name__
  expected = CARRIED_SLOTS.get(kind)
  why = "--nocarry_optimizer_state"
  if slots and expected is None:
    slots, why = False, (f"audioclf carries {', '.join(CARRIED_SLOTS)} state, whose Keras 2 and "
                         f"Keras 3 updates it has compared, not {kind}'s: they start fresh")
  elif slots and not set(legacy.slot_names) <= set(expected):
    slots, why = False, (f"the checkpoint's slots {legacy.slot_names} are not {kind}'s "
                         f"{list(expected)} (its optimizer was {legacy.optimizer_class or '?'}): "
                         "they start fresh")
  missing = assign_optimizer_state(model, legacy, names, kind.lower(), slots=slots, why_fresh=why)
  return missing, slots and legacy.slots is not None
