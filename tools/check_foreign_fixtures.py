"""Checks tests/fixtures/foreign against Keras itself, on whichever stack runs it (a check, not product code).

  .venv/bin/python tools/check_foreign_fixtures.py                   # current: Keras 3 proof of concept
  .venv-legacy/bin/python tools/check_foreign_fixtures.py [--remake]  # legacy: Keras 2 parity

Legacy (Keras 2): restores each checkpoint into the builder's model with
`tf.train.Checkpoint(model)` and compares its predictions with parity.npz's
`probabilities` (within 1e-6), then trains it one step on step_x/step_y with
train_on_batch (the optimizer's slots and step come from the same checkpoint)
and compares with `next_probabilities` (within 1e-6). --remake also reruns
make_foreign_estimators.py into a temporary folder and compares every file, byte for byte.

Current (Keras 3, no audioclf): reads the checkpoint with tf.train.load_checkpoint,
assigns layer_with_weights-<i>/<weight> to the i-th layer with weights of the
same builder's Keras 3 model (checking Keras 2's weight order, from info.json),
compares predictions (within 1e-5), then carries the optimizer (step and
slots), trains one step and compares with `next_probabilities`. It also prints
that step with fresh slots, to show the carried state is what makes it match,
and for RMSprop the step with Keras 2's RMSprop update: stock Keras 3 RMSprop
differs by design (tests/fixtures/foreign/README.md), so that one must be
within 1e-5 and the stock one is only reported. --map prints the key maps.
Exits 1 if a check misses its tolerance.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES_DIR = os.path.join(ROOT, "tests", "fixtures", "foreign")
sys.path.insert(0, FIXTURES_DIR)
# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf
import keras

KERAS3 = int(keras.__version__.split(".")[0]) >= 3
FIXTURES = ("spectrogram_cnn", "frames_gru", "raw_conv")
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
SLOT = "/.OPTIMIZER_SLOT/optimizer/"
# Keras 2 legacy optimizer slot -> Keras 3's name for it (in the slot variable's name).
KERAS3_SLOTS = {"m": "momentum", "v": "velocity", "rms": "velocity", "momentum": "momentum"}
STEP_KEY = "estimator_global_step" + VALUE


class Fixture:
  """One fixture folder: info.json, parity.npz, and its model_dir's checkpoint."""

  def __init__(self, name: str, folder: str = FIXTURES_DIR):
    self.name = name
    self.folder = os.path.join(folder, name)
    with open(os.path.join(self.folder, "info.json")) as f:
      self.info = json.load(f)
    self.parity = dict(np.load(os.path.join(self.folder, "parity.npz")))
    self.checkpoint = tf.train.latest_checkpoint(os.path.join(self.folder, "model_dir"))
    self.input_name = self.info["input"]["name"]

  def build(self):
    module, function = self.info["builder"].split(":")
    keras.utils.set_random_seed(0)
    return getattr(__import__(module), function)()

  @property
  def x(self):
    return self.parity[f"x_{self.input_name}"]

  @property
  def step_x(self):
    return self.parity[f"step_x_{self.input_name}"]


def max_diff(a, b) -> float:
  return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def remake_matches() -> bool:
  """Reruns the fixture tool into a temporary folder; True if every file is the same bytes."""
  tool = os.path.join(ROOT, "tools", "make_foreign_estimators.py")
  with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, tool, "--out_dir", tmp], check=True, capture_output=True)
    same = True
    for name in FIXTURES + ("raw_variables",):
      new, old = files_under(tmp, name), files_under(FIXTURES_DIR, name)
      for path in sorted(set(new) | set(old)):
        if not (path in new and path in old and filecmp.cmp(
            os.path.join(tmp, path), os.path.join(FIXTURES_DIR, path), shallow=False)):
          print(f"  differs: {path}")
          same = False
  return same


def files_under(root: str, name: str) -> list:
  """Paths relative to root of the files under root/name."""
  return [os.path.relpath(os.path.join(folder, f), root)
          for folder, _, files in os.walk(os.path.join(root, name)) for f in files]


def check_keras2(fixture: Fixture) -> dict:
  """Keras 2's own predictions from the checkpoint, and its own next step, against parity.npz."""
  model = fixture.build()
  x = {fixture.input_name: fixture.x}
  # The checkpoint's root is the model: its layers, its optimizer (slots and
  # hyperparameters, restored as the slots are made) and the global step.
  tf.train.Checkpoint(model).restore(fixture.checkpoint).expect_partial()
  predictions = model(x, training=False).numpy()
  # The optimizer's own `iter` is not in the checkpoint: the Estimator's step
  # stood in for it, saved only as the root's estimator_global_step.
  model.optimizer.iterations.assign(tf.train.load_variable(fixture.checkpoint, STEP_KEY))
  model.train_on_batch({fixture.input_name: fixture.step_x}, fixture.parity["step_y"])
  return {"probabilities": max_diff(predictions, fixture.parity["probabilities"]),
          "next_probabilities": max_diff(model(x, training=False).numpy(),
                                         fixture.parity["next_probabilities"])}


def legacy_attribute(layer, variable) -> str:
  """The Keras 2 checkpoint's attribute path of a Keras 3 layer's variable: `kernel`, `cell/kernel`.

  Keras 3 paths are `<layer>/<variable>`, or `<layer>/<sublayer>/<variable>`
  for an RNN's cell (`gru/gru_cell/kernel`), which Keras 2 tracks as `cell`.
  """
  parts = variable.path.split("/")
  assert parts[0] == layer.name, (variable.path, layer.name)
  if len(parts) == 2:
    return parts[1]
  assert len(parts) == 3 and isinstance(layer, keras.layers.RNN), variable.path
  return f"cell/{parts[2]}"


def assign_weights(model, reader) -> list:
  """Assigns layer_with_weights-<i>/<attr> to the i-th layer with weights; returns the map rows."""
  rows = []
  with_weights = [(j, layer) for j, layer in enumerate(model.layers) if layer.weights]
  for i, (j, layer) in enumerate(with_weights):
    for variable in layer.weights:
      key = f"layer_with_weights-{i}/{legacy_attribute(layer, variable)}"
      value = reader.get_tensor(key + VALUE)
      assert value.shape == tuple(variable.shape), (key, value.shape, variable.shape)
      variable.assign(value)
      rows.append((key, j, layer.name, variable.path, list(value.shape)))
  return rows


def carry_optimizer(model, reader, rows, slots: bool = True) -> list:
  """Sets the Keras 3 optimizer's step and (unless not slots) slots; returns the slot map rows."""
  optimizer = model.optimizer
  optimizer.build(model.trainable_variables)
  optimizer.iterations.assign(reader.get_tensor(STEP_KEY))
  # Keras 3 names a slot `<variable path, / as _>_<slot>` (add_variable_from_reference).
  by_name = {v.name: v for v in optimizer.variables}
  by_path = {path: key for key, _, _, path, _ in rows}
  carried, names = [], sorted(reader.get_variable_to_shape_map()) if slots else []
  for variable in model.trainable_variables:
    key = by_path[variable.path] + SLOT
    for name in names:
      if name.startswith(key):
        legacy_slot = name[len(key):-len(VALUE)]
        target = by_name[f"{variable.path.replace('/', '_')}_{KERAS3_SLOTS[legacy_slot]}"]
        target.assign(reader.get_tensor(name))
        carried.append((name[:-len(VALUE)], target.path))
  return carried


def keras2_rmsprop(config: dict):
  """Keras 3's RMSprop doing Keras 2 legacy RMSprop's update (momentum 0, not centered).

  Keras 2: w -= lr * g / (sqrt(rms) + epsilon); Keras 3: w -= lr * g / sqrt(rms + epsilon).
  """
  from keras import ops

  class Keras2RMSprop(keras.optimizers.RMSprop):

    def update_step(self, gradient, variable, learning_rate):
      lr, g = ops.cast(learning_rate, variable.dtype), ops.cast(gradient, variable.dtype)
      rms = self._velocities[self._get_variable_index(variable)]
      self.assign(rms, self.rho * rms + (1 - self.rho) * ops.square(g))
      self.assign_sub(variable, lr * g / (ops.sqrt(rms) + self.epsilon))

  assert config["momentum"] == 0 and not config["centered"], config
  return Keras2RMSprop.from_config(config)


def check_hyperparameters(model, reader) -> list:
  """Where the checkpoint's optimizer/<hyper> differs from the Keras 3 optimizer's config."""
  config, out = model.optimizer.get_config(), []
  for name in reader.get_variable_to_shape_map():
    if name.startswith("optimizer/"):
      hyper = name[len("optimizer/"):-len(VALUE)]
      value = float(reader.get_tensor(name))
      if hyper in config and not np.isclose(float(config[hyper]), value):
        out.append(f"{hyper}: checkpoint {value}, Keras 3 {config[hyper]}")
      elif hyper not in config and value != 0.0:
        out.append(f"{hyper}: checkpoint {value}, no Keras 3 counterpart")
  return out


def same_weights_as_keras2(model, fixture: Fixture) -> bool:
  """Whether Keras 3's (non-)trainable weights have Keras 2's names and shapes, in Keras 2's order."""
  for kind in ("trainable", "non_trainable"):
    keras2 = [[name.split(":")[0], shape] for name, shape in fixture.info["keras_weights"][kind]]
    if keras2 != [[v.path, list(v.shape)] for v in getattr(model, f"{kind}_weights")]:
      return False
  return True


def keras3_model(fixture: Fixture, reader, optimizer=None):
  """The builder's Keras 3 model (recompiled with optimizer, if given) with the checkpoint's weights."""
  keras.backend.clear_session()  # Fresh layer names: conv2d, batch_normalization, ...
  model = fixture.build()
  if optimizer is not None:
    model.compile(optimizer=optimizer, loss=model.loss, metrics=["accuracy"])
  return model, assign_weights(model, reader)


def after_one_step(model, fixture: Fixture) -> float:
  """Trains one step on the fixture's step batch; how far the predictions then are from the Estimator's."""
  model.train_on_batch(fixture.step_x, fixture.parity["step_y"])
  return max_diff(model(fixture.x, training=False).numpy(),
                  fixture.parity["next_probabilities"])


def check_keras3(fixture: Fixture):
  """The Keras 3 proof of concept; returns (differences, weight map rows, slot map rows)."""
  reader = tf.train.load_checkpoint(fixture.checkpoint)
  model, rows = keras3_model(fixture, reader)
  # Arrays, not {input name: array}: a one-input Keras 3 model warns at a dict (README).
  predictions = model(fixture.x, training=False).numpy()
  result = {"same_weights_as_keras2": same_weights_as_keras2(model, fixture),
            "probabilities": max_diff(predictions, fixture.parity["probabilities"]),
            "hyperparameter_mismatches": check_hyperparameters(model, reader)}
  slots = carry_optimizer(model, reader, rows)
  result["next_probabilities"] = after_one_step(model, fixture)
  # The same step with the step carried but the slots left as a new optimizer makes them.
  model, rows = keras3_model(fixture, reader)
  carry_optimizer(model, reader, rows, slots=False)
  result["next_without_slots"] = after_one_step(model, fixture)
  if isinstance(model.optimizer, keras.optimizers.RMSprop):
    model, rows = keras3_model(fixture, reader, keras2_rmsprop(model.optimizer.get_config()))
    carry_optimizer(model, reader, rows)
    result["next_with_keras2_rmsprop_update"] = after_one_step(model, fixture)
  return result, rows, slots


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--remake", action="store_true",
                      help="legacy stack: also rerun the fixture tool and compare the bytes")
  parser.add_argument("--map", action="store_true", help="current stack: print the key maps")
  args = parser.parse_args()
  tf.get_logger().setLevel("ERROR")
  ok = True
  for name in FIXTURES:
    fixture = Fixture(name)
    if KERAS3:
      result, rows, slots = check_keras3(fixture)
      # Stock RMSprop cannot continue Keras 2's exactly (README): its own update must match.
      next_step = result.get("next_with_keras2_rmsprop_update", result["next_probabilities"])
      ok &= (result["same_weights_as_keras2"] and result["probabilities"] <= 1e-5
             and next_step <= 1e-5)
      if args.map:
        for row in rows + slots:
          print(" ", *row)
      print(name, json.dumps(result))
    else:
      result = check_keras2(fixture)
      ok &= result["probabilities"] <= 1e-6 and result["next_probabilities"] <= 1e-6
      print(name, json.dumps(result))
  if args.remake and not KERAS3:
    same = remake_matches()
    print("remake: the same bytes" if same else "remake: DIFFERENT bytes")
    ok &= same
  print(f"Keras {keras.__version__}: {'all within tolerance' if ok else 'SOME CHECKS MISSED'}")
  sys.exit(0 if ok else 1)


if __name__ == "__main__":
  main()
