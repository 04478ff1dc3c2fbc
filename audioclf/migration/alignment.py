"""Which layer of a Keras 3 model gets which `layer_with_weights-<i>` of a legacy checkpoint.

By default the i-th layer with weights gets layer_with_weights-<i>, the order
Keras 2 numbered them in, which the same builder keeps on Keras 3. Where a
builder's layers do not line up (a layer added, dropped or built in another
order), a mapping names the pairs:

  {"adapter": null, "dense": "layer_with_weights-2"}

Keras 3 layer name -> the legacy layer it gets (or its index), or null to
leave the layer as the builder made it; the layers it does not name take the
legacy layers it does not name, in order. Legacy layers no layer takes are not
carried, and the record says so.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional

import numpy as np

from audioclf.migration.checkpoint import LAYER_PREFIX, LegacyCheckpoint, MigrationError

MAPPING_HELP = ('a .json mapping each Keras 3 layer name to "layer_with_weights-<i>", or to '
                "null to leave it as built")


class LayerMismatch(MigrationError):
  """The model's layers with weights do not line up with the checkpoint's; the message shows both."""


@dataclasses.dataclass
class Row:
  """One Keras 3 layer with weights and the legacy layer it gets.

  Attributes:
    layer: the Keras 3 layer.
    legacy: its layer_with_weights index, or None: left as built.
    pairs: (Keras 3 variable, legacy weight name) for each of its weights.
  """
  layer: Any
  legacy: Optional[int]
  pairs: list[tuple[Any, str]]


@dataclasses.dataclass
class Alignment:
  """Every Keras 3 layer with weights, in model order, with its legacy layer.

  Attributes:
    rows: one per Keras 3 layer with weights.
    unused: the legacy layers no Keras 3 layer takes.
  """
  rows: list[Row]
  unused: list[int]

  @property
  def names(self) -> dict[int, tuple[int, str]]:
    """id(Keras 3 variable) -> (legacy layer, weight name): what the optimizer's slots follow."""
    return {id(v): (row.legacy, name) for row in self.rows for v, name in row.pairs}

  def pairs_record(self, legacy: LegacyCheckpoint) -> list[list[Optional[str]]]:
    """[Keras 3 layer, legacy layer] per row (None: left as built), then the unused legacy ones."""
    return ([[row.layer.name, _legacy_label(legacy, row.legacy)] for row in self.rows]
            + [[None, _legacy_label(legacy, i)] for i in self.unused])

  def not_carried(self, legacy: LegacyCheckpoint) -> list[str]:
    """What the mapping left out, one sentence each."""
    out = [f"layer {row.layer.name!r} is left as the builder made it (the mapping gives it no "
           "legacy layer)" for row in self.rows if row.legacy is None]
    out += [f"{_legacy_label(legacy, i)} ({_weights(legacy.layers[i])}) has no layer in the "
            "model (the mapping gives it none)" for i in self.unused]
    return out


def layers_with_weights(model) -> list:
  """The model's layers with weights, in the order Keras 2 numbered `layer_with_weights-<i>`."""
  return [layer for layer in model.layers if layer.weights]


def read_mapping(path: str) -> dict[str, Optional[int]]:
  """A mapping file (see the module docstring) as Keras 3 layer name -> legacy index or None.

  Raises:
    MigrationError: not a JSON object of such entries.
  """
  try:
    with open(path) as f:
      raw = json.load(f)
  except (OSError, ValueError) as e:
    raise MigrationError(f"--mapping={path}: {e}") from e
  if not isinstance(raw, dict):
    raise MigrationError(f"--mapping={path}: must be {MAPPING_HELP}")
  mapping = {}
  for name, target in raw.items():
    match = re.fullmatch(rf"{LAYER_PREFIX}(\d+)", target) if isinstance(target, str) else None
    if isinstance(target, int) and not isinstance(target, bool):
      mapping[name] = target
    elif match or target is None:
      mapping[name] = int(match.group(1)) if match else None
    else:
      raise MigrationError(f"--mapping={path}: {name!r}: {target!r} is not "
                           f"\"{LAYER_PREFIX}<i>\", an index or null")
  return mapping


def align(model, legacy: LegacyCheckpoint, mapping: Optional[dict[str, Optional[int]]] = None,
          model_desc: str = "the model", hint: str = "another architecture") -> Alignment:
  """Pairs each Keras 3 layer with weights with a legacy layer, by order or by `mapping`.

  Args:
    model: the Keras 3 model.
    legacy: the checkpoint.
    mapping: Keras 3 layer name -> legacy index, or None (left as built); see
      the module docstring. None pairs by order alone.
    model_desc: the model, as the messages name it.
    hint: what a mismatch's message ends with: what to do about it.

  Returns:
    The alignment, every pair checked to hold the same weights in the same shapes.

  Raises:
    LayerMismatch: a pair whose weights differ, a layer with nothing to take,
      or (without a mapping) a legacy layer nothing takes; the message names
      the first and shows both sides.
    MigrationError: a mapping naming a layer the model lacks, a legacy layer
      the checkpoint lacks, or one legacy layer twice.
  """
  layers = layers_with_weights(model)
  targets = _targets(layers, len(legacy.layers), mapping, model_desc)
  rows, problem = [], None
  for k, (layer, target) in enumerate(zip(layers, targets)):
    pairs, why = [], None
    if target is not None:
      pairs, why = _pair_weights(layer, legacy.layers[target], target, model_desc)
    elif mapping is None or layer.name not in mapping:
      why = f"layer {layer.name!r} has no {LAYER_PREFIX}<i> left in the checkpoint to take"
    if why and problem is None:
      problem = (k, why)
    rows.append(Row(layer, target, pairs))
  unused = sorted(set(range(len(legacy.layers))) - {t for t in targets if t is not None})
  if unused and mapping is None and problem is None:
    problem = (len(rows), f"the checkpoint's {_legacy_label(legacy, unused[0])} has no layer "
                          f"in {model_desc} to go to")
  if problem is not None:
    k, why = problem
    raise LayerMismatch(
        f"{legacy.path!r}: {model_desc} does not line up with the checkpoint ({len(layers)} "
        f"layers with weights, the checkpoint {len(legacy.layers)}); first mismatch at #{k}: "
        f"{why}: {hint}\n{table(rows, unused, legacy, mark=k)}")
  return Alignment(rows, unused)


def _targets(layers: list, count: int, mapping: Optional[dict[str, Optional[int]]],
             model_desc: str) -> list[Optional[int]]:
  """Each layer's legacy index (None: none), by order, the mapping's pairs first."""
  if mapping is None:
    return [k if k < count else None for k in range(len(layers))]
  names = [layer.name for layer in layers]
  for name, target in mapping.items():
    if name not in names:
      raise MigrationError(f"--mapping names layer {name!r}, which {model_desc} has not among "
                           f"its layers with weights: {', '.join(names)}")
    if target is not None and not 0 <= target < count:
      raise MigrationError(f"--mapping gives {name!r} {LAYER_PREFIX}{target}; the checkpoint "
                           f"holds {LAYER_PREFIX}0 to {count - 1}")
  taken = [t for t in mapping.values() if t is not None]
  if len(set(taken)) != len(taken):
    twice = next(t for t in taken if taken.count(t) > 1)
    raise MigrationError(f"--mapping gives {LAYER_PREFIX}{twice} to two layers")
  free = iter(i for i in range(count) if i not in taken)
  return [mapping[name] if name in mapping else next(free, None) for name in names]


def _short(variable) -> str:
  """A Keras variable's own name: `kernel` (Keras 3 `.name`; Keras 2's `conv2d/kernel:0`)."""
  return variable.name.split(":")[0].rsplit("/", 1)[-1]


def _pair_weights(layer, legacy: dict[str, np.ndarray], index: int, model_desc: str
                  ) -> tuple[list[tuple[Any, str]], Optional[str]]:
  """(variable, legacy name) for each weight of `layer`, and what does not fit (else None).

  A weight pairs with the legacy weight of its own name (the last part:
  Keras 2 keys an RNN's `cell/kernel` where Keras 3 says `gru_cell/kernel`);
  one weight left on each side pairs too (Keras 2's DepthwiseConv2D
  `depthwise_kernel` is Keras 3's `kernel`).
  """
  by_last: dict[str, list[str]] = {}
  for name in legacy:
    by_last.setdefault(name.rsplit("/", 1)[-1], []).append(name)
  pairs, left, used = [], [], set()
  for variable in layer.weights:
    candidates = by_last.get(_short(variable), [])
    if len(candidates) == 1 and candidates[0] not in used:
      pairs.append((variable, candidates[0]))
      used.add(candidates[0])
    else:
      left.append(variable)
  left_legacy = [name for name in legacy if name not in used]
  if len(left) == len(left_legacy) == 1:
    pairs.append((left[0], left_legacy[0]))
  elif left or left_legacy:
    return [], (f"layer {layer.name!r} has {_layer_weights(layer)}, the checkpoint's "
                f"{LAYER_PREFIX}{index} has {_weights(legacy)}")
  for variable, name in pairs:
    if tuple(variable.shape) != legacy[name].shape:
      return [], (f"{layer.name}/{name} is {list(legacy[name].shape)} in the checkpoint but "
                  f"{list(variable.shape)} in {model_desc}")
  return pairs, None


def _layer_weights(layer) -> str:
  def own(v):  # The path below the layer: `kernel`, `gru_cell/kernel`.
    path = getattr(v, "path", None) or v.name.split(":")[0]
    return path[len(layer.name) + 1:] if path.startswith(layer.name + "/") else _short(v)
  return ", ".join(f"{own(v)} {list(v.shape)}" for v in layer.weights)


def _weights(values: dict[str, np.ndarray]) -> str:
  return ", ".join(f"{name} {list(values[name].shape)}" for name in sorted(values))


def _legacy_label(legacy: LegacyCheckpoint, index: Optional[int]) -> Optional[str]:
  if index is None:
    return None
  name = legacy.graph_names[index] if index < len(legacy.graph_names) else None
  return f"{LAYER_PREFIX}{index}" + (f" ({name})" if name else "")


def table(rows: list[Row], unused: list[int], legacy: LegacyCheckpoint,
          mark: Optional[int] = None) -> str:
  """Both sides, a line per Keras 3 layer with weights and its legacy layer; `>` marks row `mark`.

  The legacy layer's name in parentheses is Keras 2's graph name, for reading only.
  """
  lines = [("#", "Keras 3 layer: variables", "checkpoint layer: variables")]
  for k, row in enumerate(rows):
    lines.append((str(k), f"{row.layer.name}: {_layer_weights(row.layer)}",
                  f"{_legacy_label(legacy, row.legacy)}: {_weights(legacy.layers[row.legacy])}"
                  if row.legacy is not None else "- (left as built)"))
  lines += [("", "-", f"{_legacy_label(legacy, i)}: {_weights(legacy.layers[i])}")
            for i in unused]
  width = max(len(left) for _, left, _ in lines)
  return "\n".join(f"{'>' if k == mark else ' '} {index:>2} {left:<{width}}  {right}"
                   for k, (index, left, right) in enumerate(lines, start=-1))
