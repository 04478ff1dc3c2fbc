"""audioclf migrate --model: Estimators a team's own code built become Keras 3 models that predict and step alike.

The Estimators are the committed fixtures (tests/fixtures/foreign, made by
tools/make_foreign_estimators.py on the legacy stack: model_to_estimator over
team_models.py's builders, 20 steps, and each one's probabilities on 8 inputs
before and after one more step on a stored batch), so the current stack alone
tests their migration; legacy_predict, which runs there, is tested there.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import audioclf
from audioclf import Params
from audioclf.compat import keras
from audioclf.migration import parity
from audioclf.migration.alignment import LayerMismatch
from audioclf.migration.checkpoint import MigrationError
from audioclf.migration.foreign import KERAS_FILE, RECORD_FILE, migrate_estimator
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from conftest import FOREIGN, write_tone_dataset
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = ("spectrogram_cnn", "frames_gru", "raw_conv")
STEPS = 20  # tools/make_foreign_estimators.py's.
TOLERANCE = 1e-5  # Issue 16: predictions, and one more step where the optimizer state maps.

pytestmark = pytest.mark.current_only


@pytest.fixture(autouse=True)
def team_code(monkeypatch):
  """The team's builders on the path, as PYTHONPATH puts them there, and fresh layer names.

  `team_models` is imported afresh and forgotten after: other tests write a
  module of that name of their own.
  """
  monkeypatch.syspath_prepend(FOREIGN)
  sys.modules.pop("team_models", None)
  keras.backend.clear_session()
  yield
  sys.modules.pop("team_models", None)


class Fixture:
  """One fixture: its model_dir, builder, input name and parity.npz."""

  def __init__(self, name):
    self.name = name
    self.model_dir = os.path.join(FOREIGN, name, "model_dir")
    self.parity_file = os.path.join(FOREIGN, name, "parity.npz")
    with open(os.path.join(FOREIGN, name, "info.json")) as f:
      info = json.load(f)
    self.builder, self.input = info["builder"], info["input"]["name"]
    with np.load(self.parity_file) as saved:
      self.parity = dict(saved)
    self.x, self.step_x = self.parity[f"x_{self.input}"], self.parity[f"step_x_{self.input}"]

  def gaps(self, model, inputs=lambda x: x):
    """(predictions vs the Estimator's, after one train_on_batch vs its next step): max |diff|.

    `inputs` makes the model's inputs of an array (audioclf's model takes a dict).
    """
    before = np.max(np.abs(model.predict_on_batch(inputs(self.x)) - self.parity["probabilities"]))
    model.train_on_batch(inputs(self.step_x), self.parity["step_y"])
    after = np.max(np.abs(model.predict_on_batch(inputs(self.x))
                          - self.parity["next_probabilities"]))
    return float(before), float(after)


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXTURES)
def test_each_fixture_predicts_and_steps_as_its_estimator(name, tmp_path):
  fixture = Fixture(name)
  record = migrate_estimator(fixture.model_dir, str(tmp_path / "carried"), fixture.builder)
  assert record["steps"] == STEPS and record["builder"] == fixture.builder
  assert record["optimizer_state"] == "carried" and record["not_carried"] == []
  assert record["input"]["name"] == fixture.input and record["model_dir"] is None
  with open(tmp_path / "carried" / RECORD_FILE) as f:
    assert json.load(f)["layers"] == record["layers"]
  # The .keras file, loaded by plain Keras, is compiled with the carried step and slots.
  model = keras.saving.load_model(str(tmp_path / "carried" / KERAS_FILE))
  assert int(model.optimizer.iterations.numpy()) == STEPS
  before, after = fixture.gaps(model)
  assert before <= TOLERANCE and after <= TOLERANCE, (before, after)
  # The control: the same step from fresh slots lands far off (5e-3 to 9e-2).
  migrate_estimator(fixture.model_dir, str(tmp_path / "fresh"), fixture.builder,
                    carry_optimizer_state=False)
  _, fresh = fixture.gaps(keras.saving.load_model(str(tmp_path / "fresh" / KERAS_FILE)))
  assert fresh > 100 * max(after, 1e-7), (after, fresh)


def test_rmsprop_takes_the_legacy_steps_with_epsilon_squared(tmp_path):
  """Keras 2's legacy RMSprop (momentum 0) divides by sqrt(rms) + eps; Keras 3's by sqrt(rms + eps)."""
  fixture = Fixture("frames_gru")
  record = migrate_estimator(fixture.model_dir, str(tmp_path / "to"), fixture.builder)
  assert record["optimizer_changes"] == {"epsilon": 1e-14}
  assert any("epsilon 1e-07 -> 1e-14" in sentence for sentence in record["differences"])
  model = keras.saving.load_model(str(tmp_path / "to" / KERAS_FILE))
  assert model.optimizer.get_config()["epsilon"] == 1e-14
  # The same carried state with the builder's own epsilon misses the Estimator's step.
  stock = keras.saving.load_model(str(tmp_path / "to" / KERAS_FILE))
  stock.optimizer.epsilon = 1e-7
  assert fixture.gaps(stock)[1] > TOLERANCE > fixture.gaps(model)[1]


def test_a_checkpoint_of_no_keras_model_does_not_fit_a_keras_builder(tmp_path):
  """A model_fn's name-based checkpoint goes to test_migrate_named's road, and refuses this builder there."""
  with pytest.raises(MigrationError) as refused:
    migrate_estimator(os.path.join(FOREIGN, "raw_variables", "model_dir"), str(tmp_path / "to"),
                      "team_models:raw_conv")
  first, *table = str(refused.value).splitlines()
  assert ("team_models:raw_conv's model does not line up with the name-based checkpoint (6 "
          "weights, the checkpoint 4 variables)") in first
  assert table and "hidden/weights [16, 8]" in table[-1] + "".join(table)
  assert not (tmp_path / "to").exists()


# A team's builders changed since their Estimator: raw_conv with a layer added before its head
# (an identity, so the function is the same), and frames_gru compiled with Adam instead.
TEAM_VARIANTS = '''
import keras

def raw_conv_adapter(*, samples: int = 4000, classes: int = 4):
  audio = keras.Input(shape=(samples,), name="audio")
  x = keras.layers.Reshape((samples, 1))(audio)
  x = keras.layers.Conv1D(8, 32, strides=8, activation="relu", name="conv_a")(x)
  x = keras.layers.Conv1D(8, 8, strides=4, activation="relu", name="conv_b")(x)
  x = keras.layers.MaxPooling1D(4)(x)
  x = keras.layers.GlobalAveragePooling1D()(x)
  x = keras.layers.Dense(8, use_bias=False, kernel_initializer="identity", name="adapter")(x)
  probabilities = keras.layers.Dense(classes, activation="softmax", name="head")(x)
  model = keras.Model(audio, probabilities)
  model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                loss="sparse_categorical_crossentropy")
  return model

def gru_with_adam(*, frames: int = 20, coefficients: int = 13, units: int = 8, classes: int = 3):
  mfcc = keras.Input(shape=(frames, coefficients), name="mfcc")
  x = keras.layers.GRU(units)(mfcc)
  model = keras.Model(mfcc, keras.layers.Dense(classes, activation="softmax")(x))
  model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
  return model
'''


@pytest.fixture
def team_variants(tmp_path, monkeypatch):
  (tmp_path / "team_variants.py").write_text(textwrap.dedent(TEAM_VARIANTS))
  monkeypatch.syspath_prepend(str(tmp_path))
  yield "team_variants"
  sys.modules.pop("team_variants", None)


def test_layers_that_do_not_line_up_show_both_sides_and_a_mapping_fixes_them(tmp_path,
                                                                              team_variants):
  fixture = Fixture("raw_conv")
  with pytest.raises(LayerMismatch) as mismatch:
    migrate_estimator(fixture.model_dir, str(tmp_path / "to"), f"{team_variants}:raw_conv_adapter")
  message = str(mismatch.value)
  assert ("(4 layers with weights, the checkpoint 3); first mismatch at #2: layer 'adapter' has "
          "kernel [8, 8], the checkpoint's layer_with_weights-2 has bias [4], kernel [8, 4]: "
          "give --mapping=") in message
  table = message.splitlines()[1:]
  assert table[0].split()[:2] == ["#", "Keras"]
  assert table[1].split()[:4] == ["0", "conv_a:", "kernel", "[32,"]
  assert "layer_with_weights-0 (conv1d): bias [8], kernel [32, 1, 8]" in table[1]
  assert table[3].startswith(">  2 adapter: kernel [8, 8]")
  assert table[4].split()[:2] == ["3", "head:"] and table[4].endswith("- (left as built)")
  assert not (tmp_path / "to").exists()

  mapping = tmp_path / "map.json"
  mapping.write_text(json.dumps({"adapter": None, "head": "layer_with_weights-2"}))
  record = migrate_estimator(fixture.model_dir, str(tmp_path / "to"),
                             f"{team_variants}:raw_conv_adapter", mapping=str(mapping))
  assert record["layers"] == [["conv_a", "layer_with_weights-0 (conv1d)"],
                              ["conv_b", "layer_with_weights-1 (conv1d_1)"],
                              ["adapter", None], ["head", "layer_with_weights-2 (dense)"]]
  assert record["not_carried"] == [
      "layer 'adapter' is left as the builder made it (the mapping gives it no legacy layer)",
      "1 of Keras 3's 7 sgd state variables have no value in the checkpoint (e.g. "
      "adapter_kernel_momentum); they start fresh"]
  assert record["optimizer_state"] == "partial"
  model = keras.saving.load_model(str(tmp_path / "to" / KERAS_FILE))
  assert np.max(np.abs(model.predict_on_batch(fixture.x) - fixture.parity["probabilities"])) <= (
      TOLERANCE)
  with pytest.raises(MigrationError, match="--mapping names layer 'dense', which"):
    migrate_estimator(fixture.model_dir, str(tmp_path / "to2"), f"{team_variants}:raw_conv_adapter",
                      mapping={"dense": 2})


def test_what_does_not_carry_is_named(tmp_path, team_variants):
  gru = Fixture("frames_gru")
  record = migrate_estimator(gru.model_dir, str(tmp_path / "adam"), f"{team_variants}:gru_with_adam")
  assert record["optimizer_state"] == "fresh"
  assert ("the optimizer's slots (the checkpoint's slots ['rms'] are not Adam's ['m', 'v', "
          "'vhat'] (its optimizer was RMSprop): they start fresh)") in record["not_carried"]
  assert "the legacy optimizer's rho 0.9: Adam has no such argument" in record["differences"]
  cnn = Fixture("spectrogram_cnn")
  record = migrate_estimator(cnn.model_dir, str(tmp_path / "lr"), cnn.builder,
                             model_args="learning_rate=0.02")
  assert ("learning_rate: the checkpoint's 0.01, the builder's 0.02 (the builder's is used)"
          in record["differences"])
  assert any(s.startswith("BatchNormalization's moving variance") for s in record["differences"])


def test_report_on_the_fixtures_inputs(tmp_path):
  fixture = Fixture("spectrogram_cnn")
  to = str(tmp_path / "to")
  migrate_estimator(fixture.model_dir, to, fixture.builder)
  report = parity.estimator_report(fixture.model_dir, to, inputs_file=fixture.parity_file,
                                   probabilities_file=fixture.parity_file)
  assert report["inputs"] == 8 and report["max_abs_difference"] <= TOLERANCE
  assert report["same_prediction"] == 1.0 and report["legacy_source"] == fixture.parity_file
  assert parity.report_table(report).startswith("8 inputs; max |p_legacy - p_migrated| = ")
  with pytest.raises(MigrationError, match=r"--report needs the inputs .*--report_inputs=<an "
                                           r"\.npz with an array named 'logmel', \[20, 16, 1\]"):
    parity.estimator_report(fixture.model_dir, to, probabilities_file=fixture.parity_file)


@pytest.fixture(scope="module")
def four_tones(tmp_path_factory):
  """4 classes of 0.25 s tones at 16 kHz: clips of raw_conv's 4000 samples."""
  root = tmp_path_factory.mktemp("four_tones")
  return Params(data_dir=write_tone_dataset(root / "data", labels=("a", "b", "c", "d"),
                                            per_label=6, seconds=0.25),
                cache_dir=str(root / "cache"), sample_rate=16000, clip_seconds=0.25,
                validation_percent=25, testing_percent=25, batch_size=4)


@pytest.fixture
def audio_model_dir(tmp_path, four_tones):
  """raw_conv's Estimator, migrated with the data: (the record, the model_dir's params)."""
  to = str(tmp_path / "to")
  record = migrate_estimator(Fixture("raw_conv").model_dir, to, "team_models:raw_conv",
                             params=four_tones)
  return record, model_dir_lib.read_params(to)


def test_the_audio_fixture_becomes_a_model_dir(audio_model_dir):
  record, params = audio_model_dir
  fixture, to = Fixture("raw_conv"), params.model_dir
  assert record["model_dir"] == to
  assert (params.model, params.optimizer, params.engine) == (fixture.builder, "model", "keras")
  assert model_dir_lib.read_labels(to) == ["a", "b", "c", "d"]
  assert model_dir_lib.checkpoint_step(model_dir_lib.latest_checkpoint(to)) == STEPS
  # audioclf's model (raw_conv inside, under {"waveform": ...}), restored as the engine restores
  # it, predicts and steps as the Estimator: the optimizer's state is in the checkpoint too.
  model = models.compile_model(models.build_model(params, 4), params)
  model.optimizer.build(model.trainable_variables)
  tf.train.Checkpoint(model).restore(model_dir_lib.latest_checkpoint(to)).assert_consumed()
  before, after = fixture.gaps(model, models.inputs)
  assert before <= TOLERANCE and after <= TOLERANCE, (before, after)
  with open(os.path.join(to, "train.flags")) as f:
    flagfile = f.read()
  assert "--optimizer=model" in flagfile and f"--model={fixture.builder}" in flagfile


@pytest.mark.slow
def test_audioclf_train_continues_the_migrated_model_dir(audio_model_dir):
  params = audio_model_dir[1]
  metrics = audioclf.train(params.replace(train_steps=STEPS + 3, eval_every_steps=3))
  assert metrics["steps"] == STEPS + 3
  assert model_dir_lib.checkpoint_step(model_dir_lib.latest_checkpoint(params.model_dir)) == (
      STEPS + 3)


def test_a_model_that_does_not_fit_the_data_gets_no_model_dir(tmp_path, four_tones):
  fixture = Fixture("frames_gru")
  with pytest.raises(MigrationError, match=r"no model_dir audioclf trains on: .* takes \[20, 13\] "
                                           r"and gives 3 classes; this run has clips of 4000"):
    migrate_estimator(fixture.model_dir, str(tmp_path / "to"), fixture.builder,
                      params=four_tones)
  assert not (tmp_path / "to").exists()


def _run(args, **env):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
      p for p in (ROOT, FOREIGN, os.environ.get("PYTHONPATH")) if p), **env)
  return warm.run([sys.executable, "-m", "audioclf", "migrate", *args], cwd=ROOT, env=env,
                  capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_command_line_end_to_end(tmp_path):
  fixture = Fixture("spectrogram_cnn")
  to = str(tmp_path / "to")
  proc = _run([f"--from_model_dir={fixture.model_dir}", f"--model={fixture.builder}",
               f"--to_model_dir={to}", "--report", f"--report_inputs={fixture.parity_file}",
               f"--legacy_probabilities={fixture.parity_file}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  last = json.loads(proc.stdout.strip().splitlines()[-1])
  assert last["steps"] == STEPS and last["to_model_dir"] == to
  assert last["optimizer_state"] == "carried"
  assert last["report"]["max_abs_difference"] <= TOLERANCE
  assert "audioclf migrate: differs: BatchNormalization's moving variance" in proc.stderr
  refused = _run([f"--from_model_dir={os.path.join(FOREIGN, 'raw_variables', 'model_dir')}",
                  "--model=team_models:raw_conv", f"--to_model_dir={tmp_path / 'refused'}"])
  assert refused.returncode == 1
  error = [line for line in refused.stderr.splitlines() if line.startswith("audioclf: error:")]
  assert len(error) == 1 and "does not line up with the name-based checkpoint" in error[0]


@pytest.mark.slow
def test_plain_keras_loads_the_model_without_audioclf(tmp_path):
  fixture = Fixture("spectrogram_cnn")
  migrate_estimator(fixture.model_dir, str(tmp_path / "to"), fixture.builder)
  code = textwrap.dedent("""
      import sys
      import keras, numpy as np
      model = keras.saving.load_model(sys.argv[1])
      with np.load(sys.argv[2]) as p:
        gap = np.max(np.abs(model.predict_on_batch(p["x_logmel"]) - p["probabilities"]))
      assert "audioclf" not in sys.modules
      print(gap, int(model.optimizer.iterations.numpy()))
      """)
  proc = warm.run([sys.executable, "-c", code, str(tmp_path / "to" / KERAS_FILE),
                   fixture.parity_file], capture_output=True, text=True, timeout=300,
                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  gap, step = proc.stdout.split()
  assert float(gap) <= TOLERANCE and int(step) == STEPS


@pytest.mark.slow
def test_report_runs_the_estimator_on_the_legacy_stack(tmp_path):
  python = parity.legacy_python()
  if not python:
    pytest.skip("no legacy stack's Python (.venv-legacy, or $AUDIOCLF_LEGACY_PYTHON) to run the "
                "Estimator: the fixtures' stored probabilities test the report instead")
  warm.socket_path(python)  # Serving, the report's legacy predict forks from it (tests/warm.py).
  fixture = Fixture("frames_gru")
  proc = _run([f"--from_model_dir={fixture.model_dir}", f"--model={fixture.builder}",
               f"--to_model_dir={tmp_path / 'to'}", "--report",
               f"--report_inputs={fixture.parity_file}", f"--legacy_python={python}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads(proc.stdout.strip().splitlines()[-1])["report"]
  assert report["max_abs_difference"] <= TOLERANCE
  assert report["legacy_source"].endswith("-m audioclf.migration.legacy_predict")
