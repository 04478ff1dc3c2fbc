"""Checks tests/fixtures/foreign against Keras itself, on whichever stack runs it (a check, not product code).

  .venv-legacy/bin/python tools/check_foreign_fixtures.py [--remake]  # legacy: Keras 2 parity
  .venv/bin/python tools/check_foreign_fixtures.py                   # current: audioclf's migration

Legacy (Keras 2): restores each checkpoint into the builder's model with
`tf.train.Checkpoint(model)` and compares its predictions with parity.npz's
`probabilities` (within 1e-6), then trains it one step on step_x/step_y with
train_on_batch (the optimizer's slots and step come from the same checkpoint)
and compares with `next_probabilities` (within 1e-6); each Estimator of no
Keras model (team_estimators.py) predicts its `probabilities` again (1e-6). --remake also reruns
make_foreign_estimators.py into a temporary folder and compares every file, byte for byte.

Current (Keras 3): migrates each fixture with audioclf.migration.foreign (the
product code that replaced this tool's proof of concept; tests/
test_migrate_foreign.py asserts the same) and prints its parity: predictions
and the next step within 1e-5, and the next step from fresh slots for
comparison (docs/migration.md's table).
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
sys.path.insert(0, ROOT)  # The current stack's check is audioclf's own migration.
# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf
import keras

KERAS3 = int(keras.__version__.split(".")[0]) >= 3
FIXTURES = ("spectrogram_cnn", "frames_gru", "raw_conv")
# Estimators of no Keras model (team_estimators.py): their own predictions are checked on the
# legacy stack; tests/test_migrate_named.py checks their migration.
NAME_BASED = ("layers_cnn", "raw_variables", "raw_variables_rmsprop", "raw_variables_adagrad",
              "raw_variables_centered",
              "dnn_frames", "wide_deep_frames")
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
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
    for name in FIXTURES + NAME_BASED:
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


def check_own_estimator(name: str) -> float:
  """The team's own Estimator (team_estimators.<name>) on parity.npz's inputs, against its probabilities."""
  from audioclf.migration import legacy_estimator  # pylint: disable=g-import-not-at-top
  parity = os.path.join(FIXTURES_DIR, name, "parity.npz")
  probabilities = legacy_estimator.estimator_probabilities(
      os.path.join(FIXTURES_DIR, name, "model_dir"), f"team_estimators:{name}",
      legacy_estimator.features_of(parity))
  with np.load(parity) as saved:
    return max_diff(probabilities, saved["probabilities"])


def check_keras3(fixture: Fixture) -> dict:
  """audioclf's migration of the fixture (audioclf.migration.foreign), against parity.npz.

  Its model.keras, loaded by plain Keras, predicts on x and takes one step on
  the step batch; once with the optimizer state carried, once with fresh slots.
  """
  from audioclf.migration.foreign import KERAS_FILE, migrate_estimator  # pylint: disable=g-import-not-at-top
  result = {}
  with tempfile.TemporaryDirectory() as tmp:
    for carry in (True, False):
      keras.backend.clear_session()
      to = os.path.join(tmp, str(carry))
      record = migrate_estimator(os.path.join(fixture.folder, "model_dir"), to,
                                 fixture.info["builder"], carry_optimizer_state=carry)
      model = keras.saving.load_model(os.path.join(to, KERAS_FILE))
      if carry:
        result["probabilities"] = max_diff(model.predict_on_batch(fixture.x),
                                           fixture.parity["probabilities"])
        result["optimizer_changes"] = record["optimizer_changes"]
      model.train_on_batch(fixture.step_x, fixture.parity["step_y"])
      result["next_probabilities" if carry else "next_without_slots"] = max_diff(
          model.predict_on_batch(fixture.x), fixture.parity["next_probabilities"])
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--remake", action="store_true",
                      help="legacy stack: also rerun the fixture tool and compare the bytes")
  args = parser.parse_args()
  tf.get_logger().setLevel("ERROR")
  ok = True
  for name in FIXTURES:
    fixture = Fixture(name)
    if KERAS3:
      result = check_keras3(fixture)
      ok &= result["probabilities"] <= 1e-5 and result["next_probabilities"] <= 1e-5
      print(name, json.dumps(result))
    else:
      result = check_keras2(fixture)
      ok &= result["probabilities"] <= 1e-6 and result["next_probabilities"] <= 1e-6
      print(name, json.dumps(result))
  if not KERAS3:
    for name in NAME_BASED:
      gap = check_own_estimator(name)
      ok &= gap <= 1e-6
      print(name, json.dumps({"probabilities": gap}))
  if args.remake and not KERAS3:
    same = remake_matches()
    print("remake: the same bytes" if same else "remake: DIFFERENT bytes")
    ok &= same
  print(f"Keras {keras.__version__}: {'all within tolerance' if ok else 'SOME CHECKS MISSED'}")
  sys.exit(0 if ok else 1)


if __name__ == "__main__":
  main()
