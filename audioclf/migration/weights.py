"""The legacy checkpoint's layer values, given to the same model built with Keras 3."""

from __future__ import annotations

from typing import Optional

from audioclf.migration.alignment import Alignment, align
from audioclf.migration.checkpoint import LegacyCheckpoint


def assign_weights(model, legacy: LegacyCheckpoint,
                   mapping: Optional[dict[str, Optional[int]]] = None,
                   model_desc: str = "the model params.json describes",
                   hint: str = "another architecture") -> Alignment:
  """Gives each weight of `model` its value from `legacy`, the layers paired by `alignment.align`.

  Args:
    model: the Keras 3 model.
    legacy: the checkpoint.
    mapping: see `alignment.align`; None pairs the layers by order.
    model_desc, hint: how a mismatch's message names the model and ends.

  Returns:
    The alignment; its `names` are what the optimizer's slots follow.

  Raises:
    MigrationError: the model and the checkpoint differ in layers or weights.
  """
  alignment = align(model, legacy, mapping, model_desc, hint)
  for row in alignment.rows:
    for variable, name in row.pairs:
      variable.assign(legacy.layers[row.legacy][name])
  return alignment
