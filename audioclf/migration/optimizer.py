"""The optimizer's step and slots, from a legacy checkpoint into Keras 3's optimizer."""

from __future__ import annotations

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


def assign_optimizer_state(model, legacy: LegacyCheckpoint, names: dict[int, tuple[int, str]],
                           optimizer_name: str, slots: bool = True) -> list[str]:
  """Sets the optimizer's step and, where they map, its slots from `legacy`.

  Args:
    model: the compiled Keras 3 model, its weights assigned by assign_weights.
    legacy: the checkpoint.
    names: what assign_weights returned.
    optimizer_name: params.optimizer ("adam", "rmsprop", "sgd").
    slots: False leaves every slot as a new optimizer starts it (zeros).

  Returns:
    What was not carried, one sentence each; empty when all of it was.

  Raises:
    MigrationError: a slot whose shape differs from its weight's.
  """
  optimizer = model.optimizer
  optimizer.build(model.trainable_variables)
  optimizer.iterations.assign(legacy.step)
  if not slots:
    return ["the optimizer's slots (--nocarry_optimizer_state)"]
  # Keras 3 names a slot `<weight path with _ for />_<slot>` (add_variable_from_reference).
  slot_vars = {v.name: v for v in optimizer.variables
               if v is not optimizer.iterations and v.name != "learning_rate"}
  values: dict[tuple[str, str], np.ndarray] = {}  # (Keras 3 name, slot) -> value.
  missing = []
  if legacy.slots == "per_weight":
    for variable in model.trainable_variables:
      for slot, value in legacy.per_weight.get(names[id(variable)], {}).items():
        values[(f"{variable.path.replace('/', '_')}_{slot}", slot)] = value
  elif legacy.slots == "ordered":
    layout = ORDERED_SLOTS.get(optimizer_name)
    n = len(model.trainable_variables)
    if layout is None or len(legacy.ordered) != n * len(layout):
      missing.append(f"the Keras 2 {optimizer_name} optimizer's {len(legacy.ordered)} "
                     f"state variables do not fit {n} trainable weights")
    else:
      # Adam's build makes m and v weight by weight (interleaved); a single
      # slot (RMSprop's velocity) is one per weight either way.
      for j, variable in enumerate(model.trainable_variables):
        for k, slot in enumerate(layout):
          values[(f"{variable.path.replace('/', '_')}_{slot}", slot)] = (
              legacy.ordered[j * len(layout) + k])
  if legacy.unknown_slots:
    missing.append(f"legacy slots {legacy.unknown_slots} have no Keras 3 {optimizer_name} "
                   "counterpart")
  for (name, slot), value in values.items():
    variable = slot_vars.get(name)
    if variable is None and (optimizer_name, slot) in UNREAD_SLOTS:
      continue
    if variable is None:
      missing.append(f"the legacy slot for {name} has no place in Keras 3's {optimizer_name}")
    elif tuple(variable.shape) != value.shape:
      raise MigrationError(f"{legacy.path!r}: optimizer slot {name} is {list(value.shape)}, the "
                           f"model's {list(variable.shape)}: another architecture")
    else:
      variable.assign(value)
  fresh = sorted(set(slot_vars) - {name for name, _ in values})
  if fresh and not missing:
    missing.append(f"{len(fresh)} of Keras 3's {len(slot_vars)} {optimizer_name} state "
                   f"variables have no value in the checkpoint (e.g. {fresh[0]}); they start fresh")
  return missing
