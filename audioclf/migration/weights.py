"""The legacy checkpoint's layer values, given to the same model built with Keras 3."""

from __future__ import annotations

import numpy as np

from audioclf.migration.checkpoint import LAYER_PREFIX, LegacyCheckpoint, MigrationError


def layers_with_weights(model) -> list:
  """The model's layers with weights, in the order Keras 2 numbered `layer_with_weights-<i>`."""
  return [layer for layer in model.layers if layer.weights]


def _pair_weights(layer, legacy: dict[str, np.ndarray], index: int, where: str) -> list:
  """(variable, legacy name) for each weight of `layer`: by name, else the one left on each side.

  Names agree but for a few a layer renamed (Keras 2's DepthwiseConv2D
  `depthwise_kernel` is Keras 3's `kernel`).

  Raises:
    MigrationError: the weights differ in number or shape.
  """
  variables = {v.name.split(":")[0].rsplit("/", 1)[-1]: v for v in layer.weights}
  pairs = [(v, name) for name, v in variables.items() if name in legacy]
  left = [name for name in variables if name not in legacy]
  left_legacy = [name for name in legacy if name not in variables]
  if len(left) == len(left_legacy) == 1:
    pairs.append((variables[left[0]], left_legacy[0]))
  elif left or left_legacy or len(variables) != len(legacy):
    raise MigrationError(
        f"{where}: layer {layer.name!r} (the model's layer with weights number {index}) has "
        f"weights {sorted(variables)}, the checkpoint's {LAYER_PREFIX}{index} has "
        f"{sorted(legacy)}: another architecture")
  for v, name in pairs:
    if tuple(v.shape) != legacy[name].shape:
      raise MigrationError(
          f"{where}: {layer.name}/{name} is {list(legacy[name].shape)} in the checkpoint but "
          f"{list(v.shape)} in the model params.json describes: another architecture")
  return pairs


def assign_weights(model, legacy: LegacyCheckpoint) -> dict[int, tuple[int, str]]:
  """Gives each weight of `model` its value from `legacy`.

  Returns:
    id(variable) -> (legacy layer index, weight name), for the optimizer's slots.

  Raises:
    MigrationError: the model and the checkpoint differ in layers or weights.
  """
  layers = layers_with_weights(model)
  if len(layers) != len(legacy.layers):
    raise MigrationError(
        f"{legacy.path!r} holds {len(legacy.layers)} layers with weights, the model params.json "
        f"describes has {len(layers)}: another architecture")
  names = {}
  for i, (layer, values) in enumerate(zip(layers, legacy.layers)):
    for variable, name in _pair_weights(layer, values, i, legacy.path):
      variable.assign(values[name])
      names[id(variable)] = (i, name)
  return names
