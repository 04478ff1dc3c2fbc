"""The step and the TF1 (or in-graph Keras 2) optimizer's slots of a name-based checkpoint, into Keras 3's optimizer.

  checkpoint (names.py)                          Keras 3         the update, both sides
  TF1 Adam: <v>/Adam, <v>/Adam_1, beta powers    Adam            the same (eps-hat form, t = step + 1)
  TF1 Momentum: <v>/Momentum (accumulation a)    SGD, momentum   a = mu a + g, v -= lr a; Keras m = -lr a
  TF1 Adagrad: <v>/Adagrad                       Adagrad         v -= lr g / sqrt(acc): Keras epsilon 0
  TF1 RMSProp: <v>/RMSProp, <v>/RMSProp_1        RMSprop         the same (sqrt(ms + eps), momentum)
  Keras 2 in a graph: training/<O>/<v>/<slot>    Adam, Adagrad,  as Keras 2's legacy optimizers
                                                 RMSprop, SGD    (optimizer.py); Adagrad's epsilon
                                                                 outside the root: Keras 3 gets eps**2
  global_step                                    iterations
"""

from __future__ import annotations

from typing import Any

import numpy as np

from audioclf.migration.names import NameCheckpoint
from audioclf.migration.optimizer import slot_name

# The Keras 3 optimizer that continues each legacy one: (Keras 2's layout?, its name) -> class.
KERAS3_CLASS = {(False, "Adam"): "Adam", (False, "Momentum"): "SGD",
                (False, "Adagrad"): "Adagrad", (False, "RMSProp"): "RMSprop",
                (True, "Adam"): "Adam", (True, "Adagrad"): "Adagrad",
                (True, "RMSprop"): "RMSprop", (True, "SGD"): "SGD"}


def keras3_changes(optimizer, legacy: NameCheckpoint) -> tuple[dict[str, Any], list[str]]:
  """The Keras 3 optimizer's arguments that must change to take the legacy optimizer's steps, and why."""
  kind = type(optimizer).__name__
  epsilon = float(optimizer.get_config().get("epsilon") or 0.0)
  if kind == "Adagrad" and not legacy.keras_optimizer and epsilon:
    return {"epsilon": 0.0}, [
        f"Adagrad's epsilon {epsilon:g} -> 0: TF1's Adagrad divides by sqrt(accumulator), "
        "with no epsilon"]
  if kind == "Adagrad" and legacy.keras_optimizer and legacy.optimizer == "Adagrad":
    squared = float(f"{epsilon ** 2:.7g}")
    return {"epsilon": squared}, [
        f"Adagrad's epsilon {epsilon:g} -> {squared:g}: Keras 2's Adagrad divides by "
        "sqrt(accumulator) + epsilon, Keras 3's by sqrt(accumulator + epsilon)"]
  return {}, []


def carry_named_optimizer(model, legacy: NameCheckpoint, pairs, slots: bool = True
                          ) -> tuple[str, list[str], list[str]]:
  """Sets the step and, where they map, the slots of `model.optimizer` from `legacy`.

  Args:
    model: the compiled Keras 3 model, its weights assigned.
    legacy: the checkpoint.
    pairs: the NamePairs' (Keras 3 variable, checkpoint variable) pairs.
    slots: False leaves them fresh (--nocarry_optimizer_state).

  Returns:
    (the state: "carried", "partial" or "fresh"; what was not carried and
    what differs, one sentence each).
  """
  optimizer = getattr(model, "optimizer", None)
  if optimizer is None:
    return "fresh", ["the step and the optimizer's state: the model is not compiled"], []
  optimizer.build(model.trainable_variables)
  missing, differences = [], []
  if legacy.step is None:
    missing.append("the step: the checkpoint holds no global_step")
  else:
    optimizer.iterations.assign(legacy.step)
  kind = type(optimizer).__name__
  expected = KERAS3_CLASS.get((legacy.keras_optimizer, legacy.optimizer))
  missing += [f"the legacy {what}" for what in legacy.unknown]
  if legacy.optimizer is None:
    return "fresh", missing + ["the optimizer's slots: the checkpoint holds none"], differences
  if not slots or expected != kind:
    why = ("--nocarry_optimizer_state" if not slots else
           f"the checkpoint's {legacy.optimizer} continues in Keras 3's {expected}, the "
           f"model's is {kind}" if expected else
           f"audioclf has compared no Keras 3 optimizer's updates with {legacy.optimizer}'s")
    return "fresh", missing + [f"the optimizer's slots ({why}): they start fresh"], differences
  values, why = _slot_values(model, legacy, pairs)
  missing += why
  if legacy.optimizer == "Adam" and not legacy.keras_optimizer:
    differences += _beta_powers(optimizer, legacy)
  slot_vars = {v.name: v for v in optimizer.variables}
  carried = 0
  for name, value in values.items():
    if name in slot_vars and tuple(slot_vars[name].shape) == value.shape:
      slot_vars[name].assign(value)
      carried += 1
    else:
      missing.append(f"the legacy slot for {name} has no place in Keras 3's {kind}")
  return ("fresh" if not carried else "partial" if missing else "carried"), missing, differences


def _slot_values(model, legacy: NameCheckpoint, pairs) -> tuple[dict[str, np.ndarray], list[str]]:
  """Keras 3 slot variable name -> value; what cannot carry, in words."""
  optimizer = model.optimizer
  config, values = optimizer.get_config(), {}
  momentum_scale = None
  if legacy.optimizer == "Momentum" and not legacy.keras_optimizer:
    rate = config.get("learning_rate")
    if not isinstance(rate, (int, float)) or not config.get("momentum") or config.get("nesterov"):
      return {}, ["TF1 Momentum's accumulations: Keras 3's SGD continues them with a constant "
                  "learning rate and momentum, without Nesterov"]
    momentum_scale = -float(rate)  # Keras 3 keeps -lr times TF1's accumulation.
  trainable = {id(v) for v in model.trainable_variables}
  for variable, name in pairs:
    if id(variable) not in trainable:
      continue
    for slot, value in legacy.slots.get(name, {}).items():
      if slot == "momentum" and momentum_scale is not None:
        value = value * np.float32(momentum_scale)
      if slot == "momentum" and _keeps_no_momentum(optimizer):
        continue  # Without momentum Keras 3 keeps none, and the legacy update never reads it.
      values[slot_name(variable, slot)] = value
  return values, []


def _keeps_no_momentum(optimizer) -> bool:
  """An RMSprop (or SGD) of momentum 0, which keeps no momentum slot in Keras 3."""
  return type(optimizer).__name__ in ("RMSprop", "SGD") and not optimizer.get_config().get(
      "momentum")


def _beta_powers(optimizer, legacy: NameCheckpoint) -> list[str]:
  """Where TF1 Adam's beta powers are not beta ** (step + 1), as Keras 3 computes them from the step."""
  config, out = optimizer.get_config(), []
  for name, beta in (("beta1_power", "beta_1"), ("beta2_power", "beta_2")):
    saved = legacy.hyperparameters.get(name)
    if saved is None or legacy.step is None:
      continue
    expected = float(config[beta]) ** (legacy.step + 1)
    if not np.isclose(saved, expected, rtol=1e-5):
      out.append(f"TF1 Adam's {name} {saved:.7g} is not {beta} {config[beta]:g} ** (step "
                 f"{legacy.step} + 1) = {expected:.7g}: the optimizer ran other steps than "
                 "global_step, or with another beta; Keras 3 uses its step")
  return out
