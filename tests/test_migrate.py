"""audioclf.migrate: legacy model_dirs become Keras 3 ones that predict the same and train on.

The legacy model_dirs are the committed fixtures (tests/fixtures/legacy, made by
tools/make_legacy_fixtures.py on the legacy stack: 30 Adam steps of a width-8
cnn per engine, and each model's probabilities on three clips), so the current
stack alone tests migration; where the legacy stack's Python is present as
well, one test also trains a fresh legacy model_dir through it.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import audioclf
from audioclf import Params
from audioclf.data import fill as fill_lib
from audioclf.model import model_dir as model_dir_lib
from audioclf.deploy import predict as predict_lib
from audioclf.migration import parity
from audioclf.migration.checkpoint import MigrationError
from audioclf.migration.migrate import migrate
from conftest import tone, write_tone_dataset
import warm


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "legacy")
LEGACY_STEPS = 30  # tools/make_legacy_fixtures.py's STEPS.
FIXTURE_ENGINES = ("keras", "estimator")


@pytest.fixture(scope="module")
def tone_data(tmp_path_factory):
  """The data the fixtures were trained on (write_tone_dataset writes it identically)."""
  root = tmp_path_factory.mktemp("migrate_data")
  data = {"data_dir": write_tone_dataset(root / "data"), "cache_dir": str(root / "cache")}
  # Filled once here, so no test pays for decoding the clips.
  fill_lib.fill(Params(clip_seconds=0.5, validation_percent=25, testing_percent=25, **data))
  return data


@pytest.fixture(scope="module", autouse=True)
def _legacy_server():
  """The legacy stack's commands here, and migrate --report's, fork from a server of its Python.

  Started with the file's first test, it imports TensorFlow while the
  others run (tests/warm.py).
  """
  python = parity.legacy_python()
  if python:
    warm.start(python)


def _fixture(engine):
  return os.path.join(FIXTURES, engine)


@pytest.mark.current_only
@pytest.mark.parametrize("engine", FIXTURE_ENGINES)
def test_migrated_model_predicts_what_the_legacy_one_did(engine, tmp_path, tone_data):
  to = str(tmp_path / "migrated")
  record = migrate(_fixture(engine), to)
  assert record["steps"] == LEGACY_STEPS
  assert record["from_engine"] == engine
  assert record["weights"] == 17  # 3 convs, 3 batch norms (4 each), the dense kernel and bias.
  assert record["optimizer_state"] == "carried" and record["not_carried"] == []
  # A model_dir of the current stack: labels, params with the stack and the record, checkpoint.
  assert model_dir_lib.read_labels(to) == ["high", "low", "mid"]
  with open(os.path.join(to, "params.json")) as f:
    saved = json.load(f)
  assert saved["stack"]["keras"] == 3 and saved["engine"] == "keras"
  assert saved["model_dir"] == to
  assert saved["migration"]["from_engine"] == engine
  assert model_dir_lib.checkpoint_step(model_dir_lib.latest_checkpoint(to)) == LEGACY_STEPS
  model_dir_lib.check_stack(to)

  files, legacy, labels = predict_lib.load_probabilities(
      os.path.join(FIXTURES, f"{engine}_probabilities.npz"))
  migrated_files, migrated, migrated_labels = predict_lib.probabilities(to, files)
  assert migrated_files == files and migrated_labels == labels
  assert np.max(np.abs(migrated - legacy)) <= 1e-5

  # Evaluated on the current stack, the migrated model is as accurate as the legacy run was.
  params = model_dir_lib.read_params(to).replace(**tone_data)
  assert audioclf.evaluate(to, "test", params)["accuracy"] == 1.0


@pytest.mark.current_only
def test_the_best_checkpoint_is_carried_beside_the_last(tmp_path):
  from audioclf.model import best as best_lib  # pylint: disable=g-import-not-at-top
  legacy = str(tmp_path / "legacy")
  shutil.copytree(_fixture("estimator"), legacy)  # Its checkpoint is in two shards.
  # The legacy run kept its one checkpoint as its best, as --keep_best would have.
  best_lib.Tracker(legacy, "val_loss").update(LEGACY_STEPS, {"accuracy": 1.0, "loss": 0.25},
                                              os.path.join(legacy, f"model.ckpt-{LEGACY_STEPS}"))
  to = str(tmp_path / "migrated")
  record = migrate(legacy, to)
  assert record["best"] == {"metric": "val_loss", "value": 0.25, "step": LEGACY_STEPS}
  best = model_dir_lib.choose_checkpoint(to)
  assert (best.kind, best.step) == ("best", LEGACY_STEPS)
  assert os.path.dirname(best.path) == os.path.join(to, "best")
  assert model_dir_lib.best_record(to)["evaluations"] == [
      {"step": LEGACY_STEPS, "value": 0.25, "tiebreak": 1.0}]
  files, expected, _ = predict_lib.load_probabilities(
      os.path.join(FIXTURES, "estimator_probabilities.npz"))
  for which in ("best", "last"):
    _, probs, _ = predict_lib.probabilities(to, files, checkpoint=which)
    assert np.max(np.abs(probs - expected)) <= 1e-5, which


@pytest.mark.slow
@pytest.mark.current_only
@pytest.mark.parametrize("engine", FIXTURE_ENGINES)
def test_training_continues_with_the_carried_optimizer(engine, tmp_path, tone_data):
  """M more steps from the migrated model, once with the optimizer carried and once fresh.

  The two continuations see the same batches and the same dropout and
  SpecAugment draws (same seed, same step): only the optimizer state differs.
  A fresh Adam's first step moves every weight by about the learning rate,
  the jump a migration that drops the optimizer makes; the carried one steps
  as the legacy run would have, and the validation loss carries on down.
  """
  more = 4
  runs = {}
  for carry in (True, False):
    to = str(tmp_path / f"carry_{carry}")
    migrate(_fixture(engine), to, carry_optimizer_state=carry)
    params = model_dir_lib.read_params(to).replace(
        **tone_data, train_steps=LEGACY_STEPS + more, eval_every_steps=1, log_every_steps=1)
    before = audioclf.evaluate(to, "validation", params)["loss"]
    metrics = audioclf.train(params)
    assert metrics["steps"] == LEGACY_STEPS + more
    assert model_dir_lib.checkpoint_step(model_dir_lib.latest_checkpoint(to)) == LEGACY_STEPS + more
    runs[carry] = {"before": before,
                   "first_step": _weight_distance(to, LEGACY_STEPS, LEGACY_STEPS + 1),
                   "train": _summaries(os.path.join(to, "train")),
                   "validation": _summaries(os.path.join(to, "validation"))}
  carried, fresh = runs[True], runs[False]
  # The step count continued: the summaries of both runs start at the legacy step.
  assert [s for s, _ in carried["train"]] == list(range(LEGACY_STEPS, LEGACY_STEPS + more))
  # Same first batch, same weights: the first loss (taken before any update) agrees.
  assert carried["train"][0][1] == pytest.approx(fresh["train"][0][1], rel=1e-5)
  # A fresh optimizer's first step: about lr * sqrt(trainable weights); the carried one's far less.
  assert carried["first_step"] < 0.5 * fresh["first_step"], runs
  val_carried = [loss for _, loss in carried["validation"]]
  val_fresh = [loss for _, loss in fresh["validation"]]
  assert val_carried[0] < val_fresh[0], runs
  assert max(val_carried) < carried["before"], runs  # The curve continues down from the migration.


def _summaries(log_dir, tag="epoch_loss"):
  values = {}
  for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == tag:
          values[event.step] = float(tf.make_ndarray(value.tensor))
  return sorted(values.items())


def _weight_distance(model_dir, step_a, step_b):
  """The Euclidean distance between the trainable weights of two checkpoints of a model_dir."""
  a, b = (tf.train.load_checkpoint(os.path.join(model_dir, f"model.ckpt-{s}"))
          for s in (step_a, step_b))
  names = [n for n in a.get_variable_to_shape_map()
           if n.startswith("_operations/") and "moving_" not in n]
  assert names
  return float(np.sqrt(sum(np.sum((b.get_tensor(n) - a.get_tensor(n)) ** 2) for n in names)))


@pytest.mark.current_only
def test_parity_report_from_saved_legacy_probabilities(tmp_path):
  to = str(tmp_path / "migrated")
  migrate(_fixture("estimator"), to)
  params = model_dir_lib.read_params(to).replace(data_dir=os.path.join(FIXTURES, "clips"))
  report = parity.parity_report(
      _fixture("estimator"), to, params,
      probabilities_file=os.path.join(FIXTURES, "estimator_probabilities.npz"))
  assert report["clips"] == 3
  assert report["max_abs_difference"] <= 1e-5
  assert report["legacy_per_class"] == report["migrated_per_class"]
  assert set(report["legacy_per_class"]) == {"high", "low", "mid"}
  assert report["same_prediction"] == 1.0
  table = parity.report_table(report)
  assert "mid" in table and "max |p_legacy - p_migrated|" in table


@pytest.mark.slow
@pytest.mark.current_only
def test_migrate_command_line_prints_the_report_and_json_last(tmp_path):
  to = str(tmp_path / "migrated")
  proc = warm.run(
      [sys.executable, "-m", "audioclf", "migrate", f"--from_model_dir={_fixture('keras')}",
       f"--to_model_dir={to}", "--report",
       f"--legacy_probabilities={os.path.join(FIXTURES, 'keras_probabilities.npz')}",
       f"--data_dir={os.path.join(FIXTURES, 'clips')}"],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  last = json.loads(lines[-1])
  assert last["steps"] == LEGACY_STEPS and last["to_model_dir"] == to
  assert last["report"]["max_abs_difference"] <= 1e-5
  assert any(line.startswith("class") for line in lines)


@pytest.mark.current_only
def test_refuses_what_it_cannot_migrate(tmp_path):
  def copy(name, **params_changes):
    dst = str(tmp_path / name)
    shutil.copytree(_fixture("keras"), dst)
    if params_changes:
      path = os.path.join(dst, "params.json")
      with open(path) as f:
        values = json.load(f)
      values.update(params_changes)
      with open(path, "w") as f:
        json.dump(values, f)
    return dst

  with pytest.raises(MigrationError, match="not a folder"):
    migrate(str(tmp_path / "nowhere"), str(tmp_path / "to0"))
  with pytest.raises(MigrationError, match="holds no params.json"):
    migrate(os.path.join(FIXTURES, "clips"), str(tmp_path / "to1"))
  no_checkpoint = copy("no_checkpoint")
  for path in glob.glob(os.path.join(no_checkpoint, "model.ckpt-*")):
    os.remove(path)
  with pytest.raises(MigrationError, match="holds no checkpoint"):
    migrate(no_checkpoint, str(tmp_path / "to2"))
  with pytest.raises(MigrationError,
                     match=r"block0_conv/kernel is \[3, 3, 1, 8\] in the checkpoint but "
                           r"\[3, 3, 1, 16\]"):
    migrate(copy("wider", model_args={"width": 16}), str(tmp_path / "to3"))
  with pytest.raises(MigrationError, match="layers with weights"):
    migrate(copy("other_model", model="ds_cnn"), str(tmp_path / "to4"))
  target = tmp_path / "not_empty"
  target.mkdir()
  (target / "keep.txt").write_text("mine")
  with pytest.raises(MigrationError, match="not empty"):
    migrate(_fixture("keras"), str(target))
  assert os.listdir(target) == ["keep.txt"]
  migrated = str(tmp_path / "migrated")
  migrate(_fixture("keras"), migrated)
  with pytest.raises(MigrationError, match="needs no migration"):
    migrate(migrated, str(tmp_path / "to5"))
  # Nothing half-written was left beside the targets.
  assert not glob.glob(str(tmp_path / ".migrate-*"))


@pytest.mark.current_only
def test_a_moved_estimator_model_dir_migrates(tmp_path):
  # The Estimator's `checkpoint` file names absolute paths, which a copy elsewhere keeps.
  moved = str(tmp_path / "moved")
  shutil.copytree(_fixture("estimator"), moved)
  with open(os.path.join(moved, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "/gone/elsewhere/model.ckpt-30"\n')
  assert migrate(moved, str(tmp_path / "to"))["checkpoint"] == "model.ckpt-30"


@pytest.mark.legacy_only
def test_migrate_refuses_to_run_on_the_legacy_stack(tmp_path):
  with pytest.raises(MigrationError, match="current stack"):
    migrate(_fixture("keras"), str(tmp_path / "to"))


# One training step of a model_dir's model, resumed as the Keras engine resumes, on the batch in
# argv[2]; argv[3] receives the probabilities before and after it. Dropout and SpecAugment's
# masks are off (the layers stay: Keras 3 keys a checkpoint by layer index), so the step is the
# same computation on both stacks.
_ONE_STEP = """
import sys
import numpy as np
import tensorflow as tf
from audioclf.model import model_dir as model_dir_lib
from audioclf.model import build as models
model_dir, batch, out = sys.argv[1:]
params = model_dir_lib.read_params(model_dir).replace(dropout=0.0)
model = models.compile_model(models.build_model(params, len(model_dir_lib.read_labels(model_dir))),
                             params)
spec_augment = model.get_layer("spec_augment")
spec_augment.freq_masks = spec_augment.time_masks = 0
checkpoint = model_dir_lib.latest_checkpoint(model_dir)
if hasattr(model.optimizer, "build"):  # Keras 2's legacy optimizer (the Estimator's) makes its
  model.optimizer.build(model.trainable_variables)  # slots on its first step, restoring them then.
# The probabilities before the step, compared too, show that the weights were restored.
tf.train.Checkpoint(model).read(checkpoint).expect_partial()
# The Estimator keeps the step in its global step; its optimizer reads that one.
model.optimizer.iterations.assign(model_dir_lib.checkpoint_step(checkpoint))
with np.load(batch) as b:
  before = models.predict_fn(model)(b["x"])
  model.train_on_batch(models.inputs(b["x"]), b["y"])
  np.save(out, np.stack([before, models.predict_fn(model)(b["x"])]))
"""


@pytest.mark.slow
@pytest.mark.current_only
@pytest.mark.parametrize("engine", FIXTURE_ENGINES)
def test_the_next_step_is_the_one_the_legacy_optimizer_would_take(engine, tmp_path):
  """One more step on the same batch, on each stack, from the legacy and the migrated model_dir.

  Adam's step depends on its m, v and step count: only a migration that carried
  each slot to its own weight gives the legacy stack's next step. A fresh
  optimizer's step, the control, lands elsewhere.
  """
  python = parity.legacy_python()
  if not python:
    pytest.skip("no legacy stack's Python (.venv-legacy, or $AUDIOCLF_LEGACY_PYTHON) to take "
                "the legacy step")
  x = np.stack([tone(f, 0.5, 16000, seed=i) for i, f in enumerate((300.0, 660.0, 1452.0) * 2)])
  batch = str(tmp_path / "batch.npz")
  np.savez(batch, x=x, y=np.array([1, 2, 0] * 2))  # labels.txt: high, low, mid.
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))

  def step(python_, model_dir, name):
    out = str(tmp_path / f"{name}.npy")
    proc = warm.run([python_, "-c", _ONE_STEP, model_dir, batch, out], env=env,
                    capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(out)

  legacy_dir = str(tmp_path / "legacy")
  shutil.copytree(_fixture(engine), legacy_dir)  # Keras 2 restores from a writable copy.
  legacy = step(python, legacy_dir, "legacy")
  for carry in (True, False):
    migrate(_fixture(engine), str(tmp_path / f"carry_{carry}"),
                        carry_optimizer_state=carry)
  carried = step(sys.executable, str(tmp_path / "carry_True"), "carried")
  fresh = step(sys.executable, str(tmp_path / "carry_False"), "fresh")
  for before in (carried[0], fresh[0]):
    assert np.max(np.abs(before - legacy[0])) <= 1e-5
  carried_gap, fresh_gap = (float(np.max(np.abs(after[1] - legacy[1])))
                            for after in (carried, fresh))
  assert carried_gap <= 1e-5 and fresh_gap > 10 * carried_gap, (carried_gap, fresh_gap)


@pytest.mark.slow
@pytest.mark.current_only
def test_fresh_legacy_run_migrates_with_a_report_from_the_legacy_stack(tmp_path, tone_data):
  """Trains on the legacy Python, migrates here with --report running it again, continues."""
  python = parity.legacy_python()
  if not python:
    pytest.skip("no legacy stack's Python (.venv-legacy, or $AUDIOCLF_LEGACY_PYTHON): the "
                "committed fixtures test migration instead")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
  legacy_dir, to = str(tmp_path / "legacy"), str(tmp_path / "migrated")
  data = [f"--data_dir={tone_data['data_dir']}", f"--cache_dir={tone_data['cache_dir']}"]
  common = ["--clip_seconds=0.5", "--batch_size=8", "--model_args=width=8", "--validation_percent=25",
            "--testing_percent=25", "--learning_rate=3e-3", "--log_every_steps=5"]

  def run(cmd):
    proc = warm.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])

  trained = run([python, "-m", "audioclf", "train", "--engine=estimator", f"--model_dir={legacy_dir}",
                 "--train_steps=20", "--eval_every_steps=20", *data, *common])
  assert trained["steps"] == 20
  migrated = run([sys.executable, "-m", "audioclf", "migrate", f"--from_model_dir={legacy_dir}",
                  f"--to_model_dir={to}", "--report", f"--legacy_python={python}", *data])
  assert migrated["steps"] == 20 and migrated["optimizer_state"] == "carried"
  report = migrated["report"]
  assert report["max_abs_difference"] <= 1e-5
  assert report["migrated_accuracy"] == report["legacy_accuracy"]
  assert os.path.isfile(os.path.join(to, parity.LEGACY_PROBABILITIES_FILE))
  params = model_dir_lib.read_params(to).replace(train_steps=25)
  assert audioclf.train(params)["steps"] == 25
