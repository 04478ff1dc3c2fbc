"""A team's Estimator's own probabilities, on the legacy stack: model_to_estimator over its model_dir.

  .venv-legacy/bin/python -m audioclf.migration.legacy_predict \\
      --from_model_dir=<their estimator dir> --model=team_models:raw_conv [--model_args=...] \\
      --inputs=inputs.npz --output=legacy_probabilities.npz

What `audioclf migrate --report` runs on the legacy stack for an Estimator
audioclf never built (or what a team runs there itself, handing the output to
--legacy_probabilities=): the team's builder builds its Keras 2 model,
model_to_estimator wraps it over a copy of the model_dir's latest checkpoint
(model_to_estimator writes into its model_dir; theirs stays as it was), and
`Estimator.predict` runs on the inputs, an .npz keyed by the model's input
name (or x_<name>, as tests/fixtures/foreign's parity.npz). The output .npz
holds `probabilities` [inputs, classes].

It is no audioclf command (those are the current stack's verbs, under
audioclf.commands): it runs on the other stack, for migrate, and so keeps its
few flags here.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from typing import Optional, Sequence, Union

import numpy as np
import tensorflow as tf
from absl import app, flags

from audioclf import compat
from audioclf.migration.checkpoint import MigrationError, find_checkpoint
from audioclf.model import registry
from audioclf.params import ModelArgs

PROBABILITIES = "probabilities"  # The output .npz's array, as --legacy_probabilities reads it.


def inputs_of(path: str, name: str) -> np.ndarray:
  """The array named `name` (or `x_<name>`) of an .npz.

  Raises:
    MigrationError: the file holds neither.
  """
  with np.load(path) as saved:
    for key in (name, f"x_{name}"):
      if key in saved:
        return saved[key]
    raise MigrationError(f"{path!r} holds no array named {name!r} or 'x_{name}' (the model's "
                         f"input); it holds {', '.join(saved.files)}")


def copy_latest_checkpoint(from_model_dir: str, model_dir: str) -> None:
  """The latest checkpoint of from_model_dir, and a `checkpoint` file naming it, into model_dir.

  An Estimator writes into its model_dir: it runs over this copy, the team's folder untouched.

  Raises:
    MigrationError: from_model_dir holds no checkpoint.
  """
  checkpoint = find_checkpoint(from_model_dir)
  for path in glob.glob(f"{checkpoint}.*"):
    shutil.copy(path, model_dir)
  with open(os.path.join(model_dir, "checkpoint"), "w") as f:
    f.write(f'model_checkpoint_path: "{os.path.basename(checkpoint)}"\n')


def estimator_probabilities(from_model_dir: str, model: str,
                            model_args: Union[ModelArgs, dict, str],
                            inputs: Union[np.ndarray, str], batch_size: int = 64) -> np.ndarray:
  """The Estimator's predictions on `inputs`, as model_to_estimator over the builder's model gives them.

  Args:
    from_model_dir: the Estimator's model_dir (left untouched).
    model: the builder, module:function or a registered name.
    model_args: its keyword arguments.
    inputs: [n, *the model's input shape], or an .npz holding them (`inputs_of`).
    batch_size: examples per predict batch.

  Returns:
    float32 [n, classes].

  Raises:
    MigrationError: not on the legacy stack, no checkpoint, or no inputs.
  """
  if not compat.ESTIMATOR:
    raise MigrationError(f"legacy_predict runs model_to_estimator: run it on "
                         f"{compat.HOW_TO_GET[compat.LEGACY_STACK]}")
  builder = registry.resolve(model)
  keras_model = builder.function(**builder.arguments(ModelArgs(model_args)))
  name = keras_model.input_names[0]
  if isinstance(inputs, str):
    inputs = inputs_of(inputs, name)
  with tempfile.TemporaryDirectory(prefix="audioclf-legacy-predict-") as model_dir:
    copy_latest_checkpoint(from_model_dir, model_dir)
    estimator = tf.keras.estimator.model_to_estimator(keras_model=keras_model,
                                                      model_dir=model_dir)

    def input_fn():
      return tf.data.Dataset.from_tensor_slices({name: inputs}).batch(batch_size)

    # A dict per batch, keyed by the output layer's name.
    batches = [next(iter(batch.values())) if isinstance(batch, dict) else batch
               for batch in estimator.predict(input_fn, yield_single_examples=False)]
  return np.concatenate(batches).astype(np.float32)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """This module's flags (see the module docstring). Idempotent."""
  if "inputs" in flag_values:
    return
  for name, help_ in (
      ("from_model_dir", "The Estimator's model_dir."),
      ("model", "The team's builder: module:function (module on PYTHONPATH)."),
      ("model_args", "The builder's keyword arguments: name=value pairs or JSON."),
      ("inputs", "An .npz of the inputs, keyed by the model's input name (or x_<name>)."),
      ("output", "The .npz to write, holding `probabilities`.")):
    flags.DEFINE_string(name, "" if name == "model_args" else None, help_,
                        flag_values=flag_values)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  values = flags.FLAGS
  probabilities = estimator_probabilities(values.from_model_dir, values.model, values.model_args,
                                          values.inputs)
  np.savez(values.output, **{PROBABILITIES: probabilities})
  print(f"{values.output}: {probabilities.shape[0]} inputs, {probabilities.shape[1]} classes",
        flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  define_flags()
  flags.mark_flags_as_required(["from_model_dir", "model", "inputs", "output"])
  app.run(main, argv)


if __name__ == "__main__":
  run()
