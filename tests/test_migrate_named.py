"""audioclf migrate of Estimators with no Keras model: a model_fn's or a canned classifier's name-based checkpoint.

The Estimators are tests/fixtures/foreign's layers_cnn (tf.compat.v1.layers,
TF1 Momentum), raw_variables (get_variable's, TF1 Adam) and dnn_frames (a
canned DNNClassifier, Keras 2's Adagrad in its graph), made on the legacy
stack with each one's probabilities and every variable after one more step;
the current stack alone tests their migration against those.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from audioclf.compat import keras
from audioclf.migration import parity
from audioclf.migration.checkpoint import MigrationError
from audioclf.migration.foreign import KERAS_FILE, RECORD_FILE, migrate_estimator
from audioclf.migration.name_mapping import NameMismatch
from conftest import FOREIGN
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 20  # tools/make_foreign_estimators.py's.
TOLERANCE = 1e-5  # Issue 49: probabilities, and the weights after one more step.
RAW_MAPPING = {"hidden/weights": "dense/kernel", "hidden/biases": "dense/bias",
               "logits/weights": "dense_1/kernel", "logits/biases": "dense_1/bias"}

pytestmark = pytest.mark.current_only


@pytest.fixture(autouse=True)
def team_code(monkeypatch):
  """The team's rewrites on the path, as PYTHONPATH puts them there, and fresh layer names."""
  monkeypatch.syspath_prepend(FOREIGN)
  sys.modules.pop("team_rewrites", None)
  keras.backend.clear_session()
  yield
  sys.modules.pop("team_rewrites", None)


class Fixture:
  """One fixture: its model_dir, info.json and parity.npz."""

  def __init__(self, name):
    self.model_dir = os.path.join(FOREIGN, name, "model_dir")
    self.parity_file = os.path.join(FOREIGN, name, "parity.npz")
    with open(os.path.join(FOREIGN, name, "info.json")) as f:
      self.info = json.load(f)
    with np.load(self.parity_file) as saved:
      self.parity = dict(saved)
    if "input" in self.info:
      name = self.info["input"]["name"]
      self.x, self.step_x = self.parity[f"x_{name}"], self.parity[f"step_x_{name}"]

  def migrate(self, to, **kwargs):
    """migrate_estimator as the docs run it: the rewrite (and mapping) or the constructor."""
    name = self.info["estimator"].split(":")[1]
    how = {"layers_cnn": {"model": "team_rewrites:layers_cnn"},
           "raw_variables": {"model": "team_rewrites:raw_variables", "mapping": RAW_MAPPING},
           "raw_variables_rmsprop": {"model": "team_rewrites:raw_variables",
                                     "model_args": "optimizer=rmsprop", "mapping": RAW_MAPPING},
           "raw_variables_adagrad": {"model": "team_rewrites:raw_variables",
                                     "model_args": "optimizer=adagrad", "mapping": RAW_MAPPING},
           "raw_variables_centered": {"model": "team_rewrites:raw_variables",
                                      "model_args": "optimizer=centered", "mapping": RAW_MAPPING},
           "dnn_frames": {"model": None, "estimator": self.info["constructor"]}}[name]
    return migrate_estimator(self.model_dir, str(to), **{**how, **kwargs})

  def model_variables(self):
    """The checkpoint's variables less the step and the optimizer's state, as info.json lists them."""
    names = self.info["variables"]
    return sorted(n for n in names if not n.startswith("training/") and "power" not in n
                  and n != "global_step" and n.rpartition("/")[0] not in names)

  def gaps(self, to, record):
    """(probabilities vs the Estimator's, the weights after one train_on_batch vs its next step)."""
    model = keras.saving.load_model(os.path.join(to, KERAS_FILE))
    before = np.max(np.abs(model.predict_on_batch(self.x) - self.parity["probabilities"]))
    model.train_on_batch(self.step_x, self.parity["step_y"])
    weights = {v.path: v.numpy() for v in model.weights}
    after = max(np.max(np.abs(weights[path] - self.parity[f"next/{name}"]))
                for name, path in record["variables"].items())
    return float(before), float(after), model


# TF1 Momentum, Adam, RMSProp (momentum 0.5; centered too), Adagrad; Keras 2's Adagrad in a
# canned graph.
@pytest.mark.parametrize("name", ("layers_cnn", "raw_variables", "raw_variables_rmsprop",
                                  "raw_variables_centered", "raw_variables_adagrad",
                                  "dnn_frames"))
def test_each_estimator_predicts_and_steps_as_itself(name, tmp_path):
  fixture = Fixture(name)
  record = fixture.migrate(tmp_path / "carried")
  assert record["steps"] == STEPS and record["optimizer_state"] == "carried"
  assert record["not_carried"] == []
  assert sorted(record["variables"]) == fixture.model_variables()
  with open(tmp_path / "carried" / RECORD_FILE) as f:
    assert json.load(f)["variables"] == record["variables"]
  before, after, model = fixture.gaps(tmp_path / "carried", record)
  assert before <= TOLERANCE and after <= TOLERANCE, (before, after)
  # It keeps training where the Estimator stopped.
  assert int(model.optimizer.iterations.numpy()) == STEPS + 1
  model.fit(fixture.step_x, fixture.parity["step_y"], epochs=1, verbose=0)
  assert int(model.optimizer.iterations.numpy()) == STEPS + 2
  # The control: the same step from fresh slots lands far off.
  fresh = fixture.migrate(tmp_path / "fresh", carry_optimizer_state=False)
  assert fresh["optimizer_state"] == "fresh"
  assert fixture.gaps(tmp_path / "fresh", fresh)[1] > 100 * max(after, 1e-7), after


def test_every_checkpoint_variable_has_a_weight(tmp_path):
  """Each model variable of each fixture went somewhere: weights, batch norm's statistics too."""
  for name, count in (("layers_cnn", 9), ("raw_variables", 4), ("dnn_frames", 6)):
    keras.backend.clear_session()
    record = Fixture(name).migrate(tmp_path / name)
    assert len(record["variables"]) == record["weights"] == count
    assert None not in record["variables"].values()
  assert record["variables"]["dnn/logits/kernel"] == "dnn_logits/kernel"
  assert record["legacy_optimizer"] == "Adagrad" and record["optimizer"] == "Adagrad"
  assert record["constructor"]["dnn"]["hidden_units"] == [16, 8]


def test_an_unmapped_rewrite_is_refused_with_both_sides_and_nothing_written(tmp_path):
  fixture = Fixture("raw_variables")
  with pytest.raises(NameMismatch) as refused:
    fixture.migrate(tmp_path / "to", mapping=None)
  first, *table = str(refused.value).splitlines()
  assert ("team_rewrites:raw_variables's model does not line up with the name-based checkpoint "
          "(4 weights, the checkpoint 4 variables); first mismatch at #0: weight dense/kernel "
          "[16, 8] gets no checkpoint variable: give --mapping=") in first
  assert table[0].split() == ["#", "Keras", "3", "weight", "checkpoint", "variable"]
  assert table[1].startswith(">  0 dense/kernel [16, 8]") and table[1].endswith("- (none)")
  assert table[-1].split() == ["-", "logits/weights", "[8,", "3]"]
  assert not (tmp_path / "to").exists()


def test_ambiguous_or_misshapen_mappings_are_refused(tmp_path):
  fixture = Fixture("raw_variables")
  with pytest.raises(NameMismatch) as refused:
    fixture.migrate(tmp_path / "to", mapping={**RAW_MAPPING, "logits/weights": "dense/kernel"})
  first, *table = str(refused.value).splitlines()
  assert first.endswith("--mapping gives 'dense/kernel' two checkpoint variables: ambiguous: "
                        "give --mapping=<a .json mapping each checkpoint variable (or a regular "
                        "expression of them) to \"<Keras 3 layer>/<weight>\", or to null to leave it>")
  # Both sides, the weight in question marked and left without a variable.
  assert table[1].startswith(">  0 dense/kernel [16, 8]") and table[1].endswith("- (none)")
  unused = [line.split(None, 1)[1] for line in table if line.split()[0] == "-"]
  assert unused == ["hidden/weights [16, 8]", "logits/weights [8, 3]"]
  with pytest.raises(NameMismatch, match=r"--mapping gives 'hidden/weights' to 'hidden/kernel', "
                                         r"which the model has not"):
    fixture.migrate(tmp_path / "to", mapping={**RAW_MAPPING, "hidden/weights": "hidden/kernel"})
  with pytest.raises(MigrationError, match=r"--mapping gives 'hidden/biases' two places, 'dense/bias' and "
                                           r"'dense_1/bias': ambiguous"):
    fixture.migrate(tmp_path / "to", mapping={**RAW_MAPPING, r"hidden/.*": "dense_1/bias"})
  with pytest.raises(NameMismatch, match=r"first mismatch at #0: logits/weights is \[8, 3\] in "
                                         r"the checkpoint but dense/kernel is \[16, 8\]"):
    fixture.migrate(tmp_path / "to", mapping={**RAW_MAPPING, "hidden/weights": "dense_1/kernel",
                                              "logits/weights": "dense/kernel"})
  assert not (tmp_path / "to").exists()
  # A null leaves a variable uncarried, and so the weight it had no value: refused too.
  with pytest.raises(NameMismatch, match=r"weight dense_1/kernel \[8, 3\] gets no checkpoint "
                                         r"variable"):
    fixture.migrate(tmp_path / "to", mapping={"hidden/weights": "dense/kernel",
                                              "hidden/biases": "dense/bias",
                                              r"logits/(weights|biases)": None})
  assert not (tmp_path / "to").exists()


# The team's rewrite of layers_cnn, changed: a Dense added before the head breaks kind-and-order.
TEAM_VARIANTS = '''
import keras

def layers_cnn_wider(*, classes: int = 4):
  logmel = keras.Input(shape=(20, 16, 1), name="logmel")
  x = keras.layers.Conv2D(4, 3, padding="same", use_bias=False)(logmel)
  x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
  x = keras.layers.GlobalAveragePooling2D()(keras.layers.MaxPooling2D(2)(x))
  x = keras.layers.Dense(8, activation="relu")(x)
  x = keras.layers.Dense(8, activation="relu")(x)
  model = keras.Model(logmel, keras.layers.Dense(classes, activation="softmax")(x))
  model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                loss="sparse_categorical_crossentropy")
  return model

def raw_variables_named(*, features: int = 16, classes: int = 3):
  inputs = keras.Input(shape=(features,), name="features")
  x = keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
  model = keras.Model(inputs, keras.layers.Dense(classes, activation="softmax", name="logits")(x))
  model.compile(optimizer=keras.optimizers.Adam(0.01, epsilon=1e-8),
                loss="sparse_categorical_crossentropy")
  return model
'''


@pytest.fixture
def team_variants(tmp_path, monkeypatch):
  (tmp_path / "team_variants.py").write_text(textwrap.dedent(TEAM_VARIANTS))
  monkeypatch.syspath_prepend(str(tmp_path))
  sys.modules.pop("team_variants", None)
  yield "team_variants"
  sys.modules.pop("team_variants", None)


def test_layers_of_a_kind_in_another_number_are_refused(tmp_path, team_variants):
  with pytest.raises(NameMismatch) as refused:
    Fixture("layers_cnn").migrate(tmp_path / "to", model=f"{team_variants}:layers_cnn_wider")
  first, *table = str(refused.value).splitlines()
  assert "(11 weights, the checkpoint 9 variables); first mismatch at #5: weight dense/kernel " in (
      first)
  assert table[1].split()[1:] == ["conv2d/kernel", "[3,", "3,", "1,", "4]", "conv2d/kernel", "[3,",
                                  "3,", "1,", "4]"]
  assert sum(line.strip().startswith("-") for line in table) == 4  # dense, dense_1 unused.
  assert not (tmp_path / "to").exists()


def test_a_regular_expression_maps_by_its_groups(tmp_path, team_variants):
  """A rewrite whose layers carry the model_fn's scope names: two expressions map all four."""
  fixture = Fixture("raw_variables")
  record = fixture.migrate(tmp_path / "to", model=f"{team_variants}:raw_variables_named",
                           mapping={r"(hidden|logits)/weights": r"\1/kernel",
                                    r"(hidden|logits)/biases": r"\1/bias"})
  assert record["variables"] == {"hidden/weights": "hidden/kernel", "hidden/biases": "hidden/bias",
                                 "logits/weights": "logits/kernel", "logits/biases": "logits/bias"}
  before, after, _ = fixture.gaps(tmp_path / "to", record)
  assert before <= TOLERANCE and after <= TOLERANCE, (before, after)


def test_adams_beta_powers_that_are_not_the_steps_are_named():
  """TF1 Adam keeps beta ** t itself; Keras 3 computes it from the step, so a mismatch is said."""
  from audioclf.migration import named_optimizer, names  # pylint: disable=import-outside-toplevel
  from audioclf.migration.checkpoint import find_checkpoint  # pylint: disable=import-outside-toplevel
  fixture = Fixture("raw_variables")
  legacy = names.NameCheckpoint.read(find_checkpoint(fixture.model_dir))
  assert legacy.optimizer == "Adam" and not legacy.keras_optimizer and legacy.step == STEPS
  assert legacy.hyperparameters["beta1_power"] == pytest.approx(0.9 ** (STEPS + 1), rel=1e-5)
  import team_rewrites  # pylint: disable=import-outside-toplevel
  model = team_rewrites.raw_variables()
  pairs = list(zip(model.weights, RAW_MAPPING))  # dense/kernel gets hidden/weights, ...
  assert named_optimizer.carry_named_optimizer(model, legacy, pairs)[2] == []
  legacy.hyperparameters["beta1_power"] = 0.9 ** 5
  state, missing, differences = named_optimizer.carry_named_optimizer(model, legacy, pairs)
  assert (state, missing) == ("carried", [])
  assert differences == [
      "TF1 Adam's beta1_power 0.59049 is not beta_1 0.9 ** (step 20 + 1) = 0.109419: the "
      "optimizer ran other steps than global_step, or with another beta; Keras 3 uses its step"]


def test_a_name_based_checkpoint_needs_a_model(tmp_path):
  with pytest.raises(MigrationError, match=r"is a name-based checkpoint \(a model_fn's or a canned "
                                           r"Estimator's\): give --model=.*--estimator="):
    migrate_estimator(Fixture("layers_cnn").model_dir, str(tmp_path / "to"), None)
  # Without --model or --estimator, migrate takes it for audioclf's own model_dir, and says what to add.
  from audioclf.migration.migrate import migrate  # pylint: disable=import-outside-toplevel
  with pytest.raises(MigrationError, match=r"holds no params.json: not a model_dir audioclf "
                                           r"trained; for an Estimator of the team's own, give "
                                           r"--model=.* or --estimator="):
    migrate(Fixture("layers_cnn").model_dir, str(tmp_path / "to"))


def _run(args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
      p for p in (ROOT, FOREIGN, os.environ.get("PYTHONPATH")) if p))
  return warm.run([sys.executable, "-m", "audioclf", "migrate", *args], cwd=ROOT, env=env,
                  capture_output=True, text=True, timeout=600)


def test_a_wide_and_deep_classifier_of_two_columns_predicts_as_itself(tmp_path):
  """DNNLinearCombinedClassifier: both parts, both columns; Keras 3 trains on with one optimizer."""
  fixture = Fixture("wide_deep_frames")
  record = migrate_estimator(fixture.model_dir, str(tmp_path / "to"), None,
                             estimator=fixture.info["constructor"])
  assert record["input"] is None and record["optimizer"] == "Adagrad"
  assert record["variables"]["linear/linear_model/bias_weights"] == "linear_energy/bias"
  assert record["not_carried"] == [
      "the legacy training/Ftrl's slots (Keras 3 trains a model with one optimizer)"]
  assert any("the linear part trained with Ftrl" in s for s in record["differences"])
  model = keras.saving.load_model(str(tmp_path / "to" / KERAS_FILE))
  features = {k: fixture.parity[f"x_{k}"] for k in ("frames", "energy")}
  assert np.max(np.abs(model.predict_on_batch(features) - fixture.parity["probabilities"])) <= (
      TOLERANCE)
  # --report takes an array per feature, and says how far the next step lands overall.
  report = parity.estimator_report(fixture.model_dir, str(tmp_path / "to"),
                                   inputs_file=fixture.parity_file,
                                   probabilities_file=fixture.parity_file)
  assert report["inputs"] == 8 and report["max_abs_difference"] <= TOLERANCE
  assert report["next_step_weights"] == 7 and report["next_step_max_abs_difference"] > TOLERANCE
  # The DNN's next step is the Estimator's (the linear part's Ftrl is not carried).
  model.train_on_batch({k: fixture.parity[f"step_x_{k}"] for k in features},
                       fixture.parity["step_y"])
  weights = {v.path: v.numpy() for v in model.weights}
  for name, path in record["variables"].items():
    if name.startswith("dnn/"):
      assert np.max(np.abs(weights[path] - fixture.parity[f"next/{name}"])) <= TOLERANCE, name


@pytest.mark.slow
def test_the_command_line_migrates_a_canned_estimator_and_refuses_in_one_line(tmp_path):
  fixture = Fixture("dnn_frames")
  constructor = tmp_path / "dnn_frames.json"  # What legacy_estimator --describe writes.
  constructor.write_text(json.dumps(fixture.info["constructor"]))
  proc = _run([f"--from_model_dir={fixture.model_dir}", f"--estimator={constructor}",
               f"--to_model_dir={tmp_path / 'to'}", "--report",
               f"--report_inputs={fixture.parity_file}",
               f"--legacy_probabilities={fixture.parity_file}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  last = json.loads(proc.stdout.strip().splitlines()[-1])
  assert last["optimizer_state"] == "carried" and last["optimizer"] == "Adagrad"
  assert last["report"]["max_abs_difference"] <= TOLERANCE
  # parity.npz holds the step batch and the Estimator's variables after it: the next step too.
  assert last["report"]["next_step_max_abs_difference"] <= TOLERANCE
  assert last["report"]["next_step_weights"] == 6
  assert "; after the next step, max |w_legacy - w_migrated| = " in proc.stdout
  assert "Adagrad's epsilon 1e-07 -> 1e-14" in proc.stderr
  refused = _run([f"--from_model_dir={Fixture('raw_variables').model_dir}",
                  "--model=team_rewrites:raw_variables", f"--to_model_dir={tmp_path / 'no'}"])
  assert refused.returncode == 1
  errors = [line for line in refused.stderr.splitlines() if line.startswith("audioclf: error:")]
  assert len(errors) == 1 and "does not line up with the name-based checkpoint" in errors[0]
  assert "Traceback" not in refused.stderr and "hidden/weights [16, 8]" in refused.stderr
  assert not (tmp_path / "no").exists()


@pytest.mark.slow
def test_report_runs_the_teams_own_estimator_on_the_legacy_stack(tmp_path):
  python = parity.legacy_python()
  if not python:
    pytest.skip("no legacy stack's Python (.venv-legacy, or $AUDIOCLF_LEGACY_PYTHON) to run the "
                "Estimator: the fixtures' stored probabilities test the report instead")
  warm.socket_path(python)  # Serving, the report's legacy run forks from it (tests/warm.py).
  fixture = Fixture("layers_cnn")
  proc = _run([f"--from_model_dir={fixture.model_dir}", "--model=team_rewrites:layers_cnn",
               "--estimator=team_estimators:layers_cnn", f"--to_model_dir={tmp_path / 'to'}",
               "--report", f"--report_inputs={fixture.parity_file}",
               f"--legacy_python={python}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads(proc.stdout.strip().splitlines()[-1])["report"]
  assert report["max_abs_difference"] <= TOLERANCE and report["same_prediction"] == 1.0
  assert report["legacy_source"].endswith("-m audioclf.migration.legacy_estimator")
  # The Estimator took its next step there too, on parity.npz's step batch.
  assert report["next_step_max_abs_difference"] <= TOLERANCE and report["next_step_weights"] == 9
  # A canned one: its constructor arguments read there too.
  proc = _run([f"--from_model_dir={Fixture('dnn_frames').model_dir}",
               "--estimator=team_estimators:dnn_frames", f"--to_model_dir={tmp_path / 'dnn'}",
               f"--legacy_python={python}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout.strip().splitlines()[-1])["constructor"] == (
      Fixture("dnn_frames").info["constructor"])
  # Two columns: the Estimator predicts and steps there on an array per feature.
  wide = Fixture("wide_deep_frames")
  proc = _run([f"--from_model_dir={wide.model_dir}", "--estimator=team_estimators:wide_deep_frames",
               f"--to_model_dir={tmp_path / 'wide'}", "--report",
               f"--report_inputs={wide.parity_file}", f"--legacy_python={python}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads(proc.stdout.strip().splitlines()[-1])["report"]
  assert report["max_abs_difference"] <= TOLERANCE and report["next_step_weights"] == 7


@pytest.mark.slow
def test_plain_keras_loads_and_trains_the_migrated_model(tmp_path):
  fixture = Fixture("layers_cnn")
  fixture.migrate(tmp_path / "to")
  code = textwrap.dedent("""
      import sys
      import keras, numpy as np
      model = keras.saving.load_model(sys.argv[1])
      with np.load(sys.argv[2]) as p:
        gap = np.max(np.abs(model.predict_on_batch(p["x_logmel"]) - p["probabilities"]))
        model.fit(p["step_x_logmel"], p["step_y"], epochs=2, verbose=0)
      assert "audioclf" not in sys.modules
      print(gap, int(model.optimizer.iterations.numpy()))
      """)
  proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "to" / KERAS_FILE),
                         fixture.parity_file], capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  gap, step = proc.stdout.split()
  assert float(gap) <= TOLERANCE and int(step) == STEPS + 2
