"""How a checkpoint says which Keras wrote it, and where it keeps the global step."""

from __future__ import annotations

# Checkpoint keys that hold the global step: Keras fit (both Keras 2's v2
# optimizer and Keras 3 name it `_iterations`), Keras 2's legacy optimizer,
# model_to_estimator.
STEP_KEYS = ("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
             "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
             "estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE")


def checkpoint_keras_major(variable_names) -> int:
  """The Keras major version that wrote a checkpoint of a model, from its variable names.

  Keras 2 tracks a functional model's layers as `layer_with_weights-<i>`,
  Keras 3 as `_operations/<i>`.
  """
  return 2 if any(name.startswith("layer_with_weights-") for name in variable_names) else 3
