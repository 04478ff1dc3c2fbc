"""A team's own Estimator on the legacy stack: its probabilities, and a canned one's constructor arguments.

  .venv-legacy/bin/python -m audioclf.migration.legacy_estimator \\
      --estimator=team_estimators:dnn_frames --describe=dnn_frames.json
  .venv-legacy/bin/python -m audioclf.migration.legacy_estimator \\
      --estimator=team_estimators:layers_cnn --from_model_dir=<its model_dir> \\
      --inputs=inputs.npz --output=legacy_probabilities.npz

`--estimator=module:function` names the function of the team's code that
returns its Estimator (a `model_fn` Estimator or a canned one), given
`model_dir=`. What `audioclf migrate --estimator=` runs here: --describe
writes a canned classifier's constructor arguments (canned.py builds the
Keras 3 model from them); --inputs runs the Estimator's own `predict` over a
copy of the model_dir's latest checkpoint (the team's folder stays as it
was) and writes `probabilities` [inputs, classes]. The inputs are the .npz's
`x_<feature>` arrays (or every array, where none is so named), keyed by feature;
where it also holds a training batch (`step_x_<feature>`, `step_y`), the
Estimator takes one more step on it from another copy, and the output holds
every variable after it, `next/<variable>`: what --report compares the
migrated model's own next step with.
"""

from __future__ import annotations

import importlib
import inspect
import json
import tempfile
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import app, flags

from audioclf import compat
from audioclf.compat import private
from audioclf.migration.checkpoint import MigrationError
from audioclf.migration.legacy_predict import PROBABILITIES, copy_latest_checkpoint

# The output's arrays of the variables after one more step (with a step batch in the inputs).
NEXT_PREFIX = "next/"
# The canned classifiers audioclf rebuilds on Keras 3, by class (TF 2.15's V2 classes).
CANNED = {"DNNClassifierV2": "DNNClassifier", "LinearClassifierV2": "LinearClassifier",
          "DNNLinearCombinedClassifierV2": "DNNLinearCombinedClassifier"}


def estimator_function(target: str) -> Callable[..., Any]:
  """The team's function `module:function` names; it must take `model_dir`.

  Raises:
    MigrationError: no such module or function, or one that takes no model_dir.
  """
  module_name, _, name = target.partition(":")
  try:
    function = getattr(importlib.import_module(module_name), name, None)
  except ImportError as e:
    raise MigrationError(f"--estimator={target}: cannot import {module_name} ({e}); put the "
                         "team's code on PYTHONPATH") from e
  if not callable(function):
    raise MigrationError(f"--estimator={target}: {module_name} has no function {name!r}")
  if "model_dir" not in inspect.signature(function).parameters:
    raise MigrationError(f"--estimator={target}: {name} takes no model_dir argument; it must "
                         "return the team's Estimator in the model_dir it is given")
  return function


def make_estimator(target: str, model_dir: Optional[str] = None):
  """The Estimator the team's function returns, in model_dir.

  Raises:
    MigrationError: not on the legacy stack, or see estimator_function.
  """
  if not compat.ESTIMATOR:
    raise MigrationError(f"--estimator runs the team's tf.estimator code: run it on "
                         f"{compat.HOW_TO_GET[compat.LEGACY_STACK]}")
  estimator = estimator_function(target)(model_dir=model_dir)
  if not isinstance(estimator, tf.estimator.Estimator):
    raise MigrationError(f"--estimator={target} returned {type(estimator).__name__}, not a "
                         "tf.estimator.Estimator")
  return estimator


def describe(target: str) -> dict[str, Any]:
  """A canned classifier's constructor arguments, as canned.py builds its Keras 3 model from them.

  Read where the class keeps them (compat.private.canned_arguments): the
  arguments as the team passed them, their defaults filled in.

  Returns:
    {"estimator": class name, "classes", "dnn": {"columns", "hidden_units",
    "activation", "dropout", "batch_norm", "optimizer"} or None, "linear":
    {"columns", "optimizer", "sparse_combiner"} or None}; a column is
    {"key", "shape"}.

  Raises:
    MigrationError: not a canned classifier audioclf rebuilds, or a column
      that is not a plain numeric one.
  """
  estimator = make_estimator(target)
  kind = CANNED.get(type(estimator).__name__)
  if kind is None:
    raise MigrationError(f"--estimator={target} returned a {type(estimator).__name__}: audioclf "
                         f"rebuilds {', '.join(CANNED.values())} (give a model_fn Estimator's "
                         "Keras 3 rewrite with --model)")
  args = private.canned_arguments(estimator)
  if not args:
    raise MigrationError(f"--estimator={target}: this TensorFlow's {kind} keeps its constructor "
                         "arguments where audioclf cannot read them")
  prefix = "dnn_" if kind == "DNNLinearCombinedClassifier" else ""
  dnn = linear = None
  if kind != "LinearClassifier":
    dnn = {"columns": _columns(args[f"{prefix}feature_columns"], target),
           "hidden_units": [int(u) for u in args[f"{prefix}hidden_units"]],
           "activation": args[f"{prefix}activation_fn"].__name__,
           "dropout": args[f"{prefix}dropout"], "batch_norm": bool(args["batch_norm"]),
           "optimizer": _optimizer_name(args[f"{prefix}optimizer"])}
  if kind != "DNNClassifier":
    lin = "linear_" if prefix else ""
    linear = {"columns": _columns(args[f"{lin}feature_columns"], target),
              "optimizer": _optimizer_name(args[f"{lin}optimizer"]),
              "sparse_combiner": args[f"{lin}sparse_combiner"]}
  # A multi-class head has a logit per class; a binary one has one (refused by canned.py).
  classes = args["head"].logits_dimension
  return {"estimator": kind, "classes": int(classes) if classes > 1 else 2, "dnn": dnn,
          "linear": linear}


def _columns(columns, target: str) -> list[dict[str, Any]]:
  out = []
  for column in columns or []:
    normalized = getattr(column, "normalizer_fn", None) is not None
    if type(column).__name__ != "NumericColumn" or normalized:
      raise MigrationError(f"--estimator={target}: feature column {column.name!r} is a "
                           f"{type(column).__name__}{' with a normalizer_fn' * normalized}; "
                           "audioclf rebuilds canned classifiers over plain numeric columns")
    out.append({"key": column.key, "shape": [int(d) for d in column.shape]})
  return out


def _optimizer_name(optimizer) -> str:
  """The optimizer's class name: the canned default is a string ("Adagrad"), else an instance."""
  return optimizer if isinstance(optimizer, str) else type(optimizer).__name__


def features_of(path: str) -> dict[str, np.ndarray]:
  """The .npz's `x_<feature>` arrays keyed by feature, or all of them where none is so named."""
  with np.load(path) as saved:
    named = {key[2:]: saved[key] for key in saved.files if key.startswith("x_")}
    return named or {key: saved[key] for key in saved.files}


def estimator_probabilities(from_model_dir: str, target: str, features: dict[str, np.ndarray],
                            batch_size: int = 64) -> np.ndarray:
  """The team's Estimator's own `probabilities` on `features`, over a copy of its checkpoint.

  Raises:
    MigrationError: see make_estimator; no checkpoint; predictions without probabilities.
  """
  with tempfile.TemporaryDirectory(prefix="audioclf-legacy-estimator-") as model_dir:
    copy_latest_checkpoint(from_model_dir, model_dir)
    estimator = make_estimator(target, model_dir)

    def input_fn():
      return tf.data.Dataset.from_tensor_slices(features).batch(batch_size)

    batches = list(estimator.predict(input_fn, yield_single_examples=False))
  if not batches or PROBABILITIES not in batches[0]:
    raise MigrationError(f"--estimator={target}'s predictions hold no {PROBABILITIES!r} "
                         f"(they hold {', '.join(batches[0]) if batches else 'nothing'})")
  return np.concatenate([b[PROBABILITIES] for b in batches]).astype(np.float32)


def step_batch_of(path: str) -> Optional[tuple[dict[str, np.ndarray], np.ndarray]]:
  """The .npz's training batch (`step_x_<feature>` arrays, `step_y`), or None where it holds none."""
  with np.load(path) as saved:
    features = {key[7:]: saved[key] for key in saved.files if key.startswith("step_x_")}
    return (features, saved["step_y"]) if features and "step_y" in saved.files else None


def estimator_next_step(from_model_dir: str, target: str, features: dict[str, np.ndarray],
                        labels: np.ndarray) -> dict[str, np.ndarray]:
  """Every checkpoint variable after the team's Estimator trains one step on (features, labels).

  The step runs over a copy of the model_dir's latest checkpoint, as a resumed job runs it.
  """
  with tempfile.TemporaryDirectory(prefix="audioclf-legacy-estimator-") as model_dir:
    copy_latest_checkpoint(from_model_dir, model_dir)
    estimator = make_estimator(target, model_dir)
    estimator.train(lambda: tf.data.Dataset.from_tensors((features, labels)), steps=1)
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """This module's flags (see the module docstring). Idempotent."""
  if "estimator" in flag_values:
    return
  for name, help_ in (
      ("estimator", "The team's function returning its Estimator: module:function."),
      ("describe", "Write the canned classifier's constructor arguments to this .json."),
      ("from_model_dir", "With --inputs: the Estimator's model_dir."),
      ("inputs", "An .npz of the inputs, keyed by feature (or x_<feature>)."),
      ("output", "With --inputs: the .npz to write, holding `probabilities`.")):
    flags.DEFINE_string(name, None, help_, flag_values=flag_values)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  try:
    if values.describe:
      with open(values.describe, "w") as f:
        json.dump(describe(values.estimator), f, indent=1)
      print(f"{values.describe}: {values.estimator}'s constructor arguments", flush=True)
    if values.inputs:
      probabilities = estimator_probabilities(values.from_model_dir, values.estimator,
                                              features_of(values.inputs))
      step = step_batch_of(values.inputs)
      after = estimator_next_step(values.from_model_dir, values.estimator, *step) if step else {}
      np.savez(values.output, **{PROBABILITIES: probabilities},
               **{f"{NEXT_PREFIX}{name}": value for name, value in after.items()})
      print(f"{values.output}: {probabilities.shape[0]} inputs, {probabilities.shape[1]} classes",
            flush=True)
  except MigrationError as e:
    raise SystemExit(f"audioclf: error: {e}") from None


def run(argv: Optional[Sequence[str]] = None) -> None:
  define_flags()
  flags.mark_flags_as_required(["estimator"])
  app.run(main, argv)


if __name__ == "__main__":
  run()
