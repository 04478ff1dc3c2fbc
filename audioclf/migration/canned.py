"""The Keras 3 model of a canned classifier (DNN, Linear, DNNLinearCombined), built from its constructor arguments.

legacy_estimator.describe reads the arguments on the legacy stack; this
builds the same function of the same numeric features in plain Keras 3
layers, named so that every checkpoint variable has one weight:

  dnn/hiddenlayer_<i>/kernel, bias            Dense dnn_hiddenlayer_<i> (the columns
                                              concatenated in key order, as input_layer does)
  dnn/logits/kernel, bias                     Dense dnn_logits
  linear/linear_model/<key>/weights           Dense linear_<key>, no bias, on that column
  linear/linear_model/bias_weights            linear_<first key>'s bias
  logits (summed) -> softmax                  Activation "probabilities"

and compiles it with the Keras 3 optimizer of the checkpoint's own
hyperparameters (training/<Optimizer>/learning_rate ...) and the canned head's
loss, the mean sparse softmax cross-entropy.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from audioclf.compat import keras
from audioclf.migration.checkpoint import MigrationError
from audioclf.migration.names import NameCheckpoint


def build(description: dict[str, Any], legacy: NameCheckpoint
          ) -> tuple[Any, dict[str, str], list[str]]:
  """The compiled Keras 3 model of a canned classifier, and which weight gets which variable.

  Args:
    description: legacy_estimator.describe's dict.
    legacy: the checkpoint (its optimizer's hyperparameters).

  Returns:
    (model, checkpoint variable -> "<layer>/<weight>", what differs, in words).

  Raises:
    MigrationError: what audioclf does not rebuild (two classes, batch norm).
  """
  kind, classes = description["estimator"], int(description["classes"])
  dnn, linear = description.get("dnn"), description.get("linear")
  if classes < 3:
    raise MigrationError(f"a {kind} of {classes} classes has a logistic head (one logit): "
                         "audioclf rebuilds canned classifiers of 3 or more classes")
  if dnn and dnn["batch_norm"]:
    raise MigrationError(f"a {kind} with batch_norm=True: audioclf rebuilds canned DNNs "
                         "without batch normalization")
  columns = {c["key"]: c["shape"] for part in (dnn, linear) if part for c in part["columns"]}
  inputs = {key: keras.Input(shape=tuple(columns[key]), name=key) for key in sorted(columns)}
  mapping, logits = {}, []
  if dnn:
    logits.append(_dnn(dnn, inputs, classes, mapping))
  if linear:
    logits.append(_linear(linear, inputs, classes, mapping))
  summed = logits[0] if len(logits) == 1 else keras.layers.Add(name="logits")(logits)
  probabilities = keras.layers.Activation("softmax", name="probabilities")(summed)
  model_inputs = inputs[next(iter(inputs))] if len(inputs) == 1 else inputs
  model = keras.Model(model_inputs, probabilities, name=kind.lower())
  optimizer, differences = _optimizer((dnn or linear)["optimizer"], legacy)
  if dnn and linear:
    differences.append(f"the linear part trained with {linear['optimizer']} in the Estimator, "
                       f"the DNN with {dnn['optimizer']}: Keras 3 trains the model with one "
                       f"optimizer, {type(optimizer).__name__}")
  if dnn and dnn["dropout"]:
    differences.append(f"dropout {dnn['dropout']}: each training step draws its own mask")
  model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy",
                metrics=["accuracy"])
  return model, mapping, differences


def _flat(tensor, shape):
  return tensor if len(shape) == 1 else keras.layers.Flatten()(tensor)


def _dnn(dnn: dict[str, Any], inputs: dict, classes: int, mapping: dict[str, str]):
  """The DNN's logits; its variables' places into `mapping`."""
  keys = sorted(c["key"] for c in dnn["columns"])
  shapes = {c["key"]: c["shape"] for c in dnn["columns"]}
  parts = [_flat(inputs[key], shapes[key]) for key in keys]
  x = parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="dnn_input")(parts)
  for i, units in enumerate(dnn["hidden_units"]):
    x = keras.layers.Dense(units, activation=dnn["activation"], name=f"dnn_hiddenlayer_{i}")(x)
    if dnn["dropout"]:
      x = keras.layers.Dropout(dnn["dropout"])(x)
    for weight in ("kernel", "bias"):
      mapping[f"dnn/hiddenlayer_{i}/{weight}"] = f"dnn_hiddenlayer_{i}/{weight}"
  for weight in ("kernel", "bias"):
    mapping[f"dnn/logits/{weight}"] = f"dnn_logits/{weight}"
  return keras.layers.Dense(classes, name="dnn_logits")(x)


def _linear(linear: dict[str, Any], inputs: dict, classes: int, mapping: dict[str, str]):
  """The linear model's logits, a Dense per column (the first with the bias); places into `mapping`."""
  columns = sorted(linear["columns"], key=lambda c: c["key"])
  parts = []
  for i, column in enumerate(columns):
    name = f"linear_{column['key']}"
    parts.append(keras.layers.Dense(classes, use_bias=i == 0, name=name)(
        _flat(inputs[column["key"]], column["shape"])))
    mapping[f"linear/linear_model/{column['key']}/weights"] = f"{name}/kernel"
  mapping["linear/linear_model/bias_weights"] = f"linear_{columns[0]['key']}/bias"
  return parts[0] if len(parts) == 1 else keras.layers.Add(name="linear_logits")(parts)


def _optimizer(name: str, legacy: NameCheckpoint) -> tuple[Any, list[str]]:
  """Keras 3's optimizer `name` with the checkpoint's saved hyperparameters; what differs, in words."""
  cls = getattr(keras.optimizers, name, None)
  if cls is None:
    raise MigrationError(f"the Estimator's optimizer {name!r} has no Keras 3 class of that name")
  saved = dict(legacy.hyperparameters) if legacy.optimizer == name else {}
  accepted = set(cls().get_config())
  # Keras 2 saved them under Keras 3's argument names (learning_rate, beta_1, rho, l1_...).
  arguments = {k: v for k, v in saved.items() if k in accepted}
  differences = []
  if saved.get("decay"):
    differences.append(f"Keras 2's decay {saved['decay']:g} has no Keras 3 argument")
  if not math.isfinite(arguments.get("learning_rate", 0.0)):
    raise MigrationError(f"{legacy.path!r}: the optimizer's learning rate is not finite")
  return cls(**arguments), differences


def input_record(model) -> Optional[dict[str, Any]]:
  """{"name", "shape"} of the model's one input, or None for several."""
  if len(model.inputs) != 1:
    return None
  return {"name": model.inputs[0].name, "shape": list(model.inputs[0].shape[1:])}
