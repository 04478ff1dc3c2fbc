"""audioclf.migration.legacy_estimator: a team's own Estimator (model_fn or canned) run on the legacy stack."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from audioclf.migration import legacy_estimator
from audioclf.migration.checkpoint import MigrationError
from conftest import FOREIGN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME_BASED = ("layers_cnn", "raw_variables", "raw_variables_rmsprop", "raw_variables_adagrad",
              "raw_variables_centered",
              "dnn_frames", "wide_deep_frames")


@pytest.fixture
def team_estimators(monkeypatch):
  monkeypatch.syspath_prepend(FOREIGN)
  sys.modules.pop("team_estimators", None)
  yield "team_estimators"
  sys.modules.pop("team_estimators", None)


def _info(name):
  with open(os.path.join(FOREIGN, name, "info.json")) as f:
    return json.load(f)


@pytest.mark.legacy_only
@pytest.mark.parametrize("name", NAME_BASED)
def test_each_estimator_predicts_what_it_predicted_when_the_fixture_was_made(name, team_estimators):
  model_dir = os.path.join(FOREIGN, name, "model_dir")
  before = sorted(os.listdir(model_dir))
  parity = os.path.join(FOREIGN, name, "parity.npz")
  probabilities = legacy_estimator.estimator_probabilities(
      model_dir, f"{team_estimators}:{name}", legacy_estimator.features_of(parity))
  with np.load(parity) as saved:
    assert np.max(np.abs(probabilities - saved["probabilities"])) <= 1e-6
  assert sorted(os.listdir(model_dir)) == before  # It ran over a copy.


@pytest.mark.legacy_only
def test_a_canned_classifier_is_described_by_its_constructor_arguments(team_estimators):
  described = legacy_estimator.describe(f"{team_estimators}:dnn_frames")
  assert described == _info("dnn_frames")["constructor"]
  assert described["dnn"] == {"columns": [{"key": "frames", "shape": [26]}],
                              "hidden_units": [16, 8], "activation": "relu", "dropout": None,
                              "batch_norm": False, "optimizer": "Adagrad"}


@pytest.mark.legacy_only
def test_what_is_not_a_canned_classifier_over_numeric_columns_is_refused_in_one_line(
    team_estimators, tmp_path, monkeypatch):
  with pytest.raises(MigrationError, match=r"returned a EstimatorV2: audioclf rebuilds "
                                           r"DNNClassifier, LinearClassifier, "
                                           r"DNNLinearCombinedClassifier \(give a model_fn"):
    legacy_estimator.describe(f"{team_estimators}:layers_cnn")
  (tmp_path / "bucketized.py").write_text(
      "import tensorflow as tf\n"
      "def dnn(model_dir=None):\n"
      "  age = tf.feature_column.numeric_column('age')\n"
      "  column = tf.feature_column.bucketized_column(age, [18, 65])\n"
      "  return tf.estimator.DNNClassifier([4], [column], n_classes=3, model_dir=model_dir)\n"
      "def no_model_dir():\n"
      "  return None\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(MigrationError, match="feature column 'age_bucketized' is a "
                                           "BucketizedColumn; audioclf rebuilds canned "
                                           "classifiers over plain numeric columns"):
    legacy_estimator.describe("bucketized:dnn")
  with pytest.raises(MigrationError, match="no_model_dir takes no model_dir argument"):
    legacy_estimator.describe("bucketized:no_model_dir")


def test_the_inputs_are_the_x_arrays_keyed_by_feature(tmp_path):
  path = str(tmp_path / "inputs.npz")
  np.savez(path, x_frames=np.zeros([2, 3]), step_x_frames=np.ones([1, 3]), probabilities=[1])
  assert list(legacy_estimator.features_of(path)) == ["frames"]
  np.savez(path, frames=np.zeros([2, 3]))
  assert list(legacy_estimator.features_of(path)) == ["frames"]


@pytest.mark.legacy_only
@pytest.mark.slow
def test_the_module_runs_as_migrate_runs_it(tmp_path):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join((ROOT, FOREIGN)))
  out, described = str(tmp_path / "p.npz"), str(tmp_path / "dnn.json")
  parity = os.path.join(FOREIGN, "dnn_frames", "parity.npz")
  proc = subprocess.run(
      [sys.executable, "-m", "audioclf.migration.legacy_estimator",
       "--estimator=team_estimators:dnn_frames", f"--describe={described}",
       f"--from_model_dir={os.path.join(FOREIGN, 'dnn_frames', 'model_dir')}",
       f"--inputs={parity}", f"--output={out}"],
      env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  with np.load(out) as written, np.load(parity) as saved:
    assert np.max(np.abs(written["probabilities"] - saved["probabilities"])) <= 1e-6
    # parity.npz holds a step batch: the Estimator took one more step on it, as when it was made.
    after = [key for key in written.files if key.startswith("next/")]
    assert "next/dnn/logits/kernel" in after and "next/global_step" in after
    for key in after:
      assert np.max(np.abs(written[key] - saved[key])) <= 1e-6, key
  with open(described) as f:
    assert json.load(f) == _info("dnn_frames")["constructor"]
  refused = subprocess.run(
      [sys.executable, "-m", "audioclf.migration.legacy_estimator",
       "--estimator=team_estimators:layers_cnn", f"--describe={described}"],
      env=env, capture_output=True, text=True, timeout=300)
  assert refused.returncode == 1 and "Traceback" not in refused.stderr
  assert refused.stderr.strip().splitlines()[-1].startswith("audioclf: error: --estimator=")
