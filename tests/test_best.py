"""The best checkpoint and early stopping, both engines; evaluate, predict and export take the best."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import audioclf
from audioclf.deploy import predict as predict_lib
from audioclf.deploy.evaluate import evaluate
from audioclf.deploy.export import export
from audioclf.model import best as best_lib
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from conftest import ENGINES, TRAIN_STEPS, tone
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_checkpoints(folder, steps):
  """Files named as a checkpoint's, each holding its step: enough for the Tracker to copy."""
  os.makedirs(folder, exist_ok=True)
  for step in steps:
    for suffix in ("index", "data-00000-of-00001"):
      with open(os.path.join(folder, f"model.ckpt-{step}.{suffix}"), "w") as f:
        f.write(str(step))
  return {step: os.path.join(folder, f"model.ckpt-{step}") for step in steps}


def test_tracker_keeps_the_best_copy_and_counts_evaluations_since(tmp_path):
  model_dir = str(tmp_path)
  paths = _fake_checkpoints(model_dir, (10, 20, 30, 40))
  tracker = best_lib.Tracker(model_dir, "val_loss", patience=2)
  losses = {10: 0.5, 20: 0.4, 30: 0.45, 40: 0.41}
  improved = [tracker.update(step, {"loss": loss, "accuracy": 0.0}, paths[step])
              for step, loss in losses.items()]
  assert improved == [True, True, False, False]
  assert tracker.exhausted and tracker.waited == 2
  assert tracker.summary() == {"metric": "val_loss", "value": 0.4, "step": 20}
  # Only the best one's files are kept, and best.json names them.
  assert sorted(os.listdir(tmp_path / "best")) == [
      "best.json", "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]
  record = json.loads((tmp_path / "best" / "best.json").read_text())
  assert record["checkpoint"] == "model.ckpt-20"
  assert [e["step"] for e in record["evaluations"]] == [10, 20, 30, 40]
  # A resumed run reads where it was: still out of patience, and a better value is a new best.
  again = best_lib.Tracker(model_dir, "val_loss", patience=3)
  assert again.summary() == tracker.summary() and again.waited == 2 and not again.exhausted
  assert again.update(50, {"loss": 0.3, "accuracy": 0.0}, _fake_checkpoints(model_dir, [50])[50])
  assert again.waited == 0
  assert model_dir_lib.best_record(model_dir)["checkpoint"] == "model.ckpt-50"
  assert (tmp_path / "best" / "model.ckpt-50.index").read_text() == "50"


def test_higher_accuracy_is_better_and_a_tie_goes_to_the_lower_loss(tmp_path):
  paths = _fake_checkpoints(str(tmp_path), (1, 2, 3, 4))
  tracker = best_lib.Tracker(str(tmp_path), "val_accuracy", patience=1)
  assert tracker.update(1, {"accuracy": 0.8, "loss": 1.0}, paths[1])
  assert tracker.update(2, {"accuracy": 0.9, "loss": 2.0}, paths[2])  # Accuracy first.
  assert not tracker.exhausted
  # The same accuracy at a higher loss keeps the earlier; at a lower one, it is the new best.
  assert not tracker.update(3, {"accuracy": 0.9, "loss": 2.5}, paths[3])
  assert tracker.exhausted and tracker.summary()["step"] == 2
  assert tracker.update(4, {"accuracy": 0.9, "loss": 0.1}, paths[4])
  assert tracker.summary()["step"] == 4 and tracker.waited == 0
  assert model_dir_lib.best_record(str(tmp_path))["tiebreak"] == 0.1


def test_a_tie_on_the_loss_goes_to_the_higher_accuracy(tmp_path):
  paths = _fake_checkpoints(str(tmp_path), (1, 2))
  tracker = best_lib.Tracker(str(tmp_path), "val_loss")
  assert tracker.update(1, {"accuracy": 0.5, "loss": 0.3}, paths[1])
  assert tracker.update(2, {"accuracy": 0.6, "loss": 0.3}, paths[2])


def test_a_record_without_a_tiebreak_keeps_its_checkpoint_on_a_tie(tmp_path):
  # best.json as an earlier release wrote it: no tiebreak value.
  model_dir = str(tmp_path)
  paths = _fake_checkpoints(model_dir, (1, 2))
  best_lib.Tracker(model_dir, "val_accuracy").update(1, {"accuracy": 0.9, "loss": 1.0}, paths[1])
  path = tmp_path / "best" / "best.json"
  path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items()
                              if k != "tiebreak"}))
  tracker = best_lib.Tracker(model_dir, "val_accuracy")
  assert not tracker.update(2, {"accuracy": 0.9, "loss": 0.1}, paths[2])
  assert tracker.summary()["step"] == 1


def test_a_resume_that_would_leave_the_best_stale_is_refused(tmp_path):
  model_dir = str(tmp_path)
  best_lib.Tracker(model_dir, "val_accuracy").update(
      10, {"accuracy": 0.5, "loss": 1.0}, _fake_checkpoints(model_dir, [10])[10])
  params = audioclf.Params(model_dir=model_dir)
  with pytest.raises(model_dir_lib.ModelDirError, match="resume with --keep_best=val_accuracy"):
    best_lib.check_resume(params)
  with pytest.raises(model_dir_lib.ModelDirError, match="rerun with --keep_best=val_accuracy"):
    best_lib.check_resume(params.replace(keep_best="val_loss"))
  best_lib.check_resume(params.replace(keep_best="val_accuracy"))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_training_keeps_the_best_and_stops_early(trained, engine, tmp_path):
  params, _ = trained(engine)
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  # The trained model is near perfect: four evaluations cannot all improve on each other.
  more = params.replace(model_dir=model_dir, train_steps=TRAIN_STEPS + 40, eval_every_steps=10,
                        keep_best="val_accuracy", early_stopping_patience=1)
  metrics = audioclf.train(more)
  assert metrics["stopped_early"] and metrics["steps"] == metrics["stopped_at_step"]
  assert TRAIN_STEPS + 20 <= metrics["steps"] < TRAIN_STEPS + 40
  latest = tf.train.latest_checkpoint(model_dir)
  assert model_dir_lib.checkpoint_step(latest) == metrics["steps"]  # Not a step more.
  record = model_dir_lib.best_record(model_dir)
  steps = [e["step"] for e in record["evaluations"]]
  assert steps == list(range(TRAIN_STEPS + 10, metrics["steps"] + 1, 10))
  # Better is a higher accuracy, then (a tie) a lower loss; the first of the best is kept, and
  # each evaluation before the last improved.
  ranks = [(e["value"], -e["tiebreak"]) for e in record["evaluations"]]
  best_at = ranks.index(max(ranks))
  assert (record["step"], record["value"]) == (steps[best_at], ranks[best_at][0])
  assert ranks[-1] <= ranks[best_at] and all(a < b for a, b in zip(ranks[:-2], ranks[1:-1]))
  assert metrics["best"] == {"metric": "val_accuracy", "value": record["value"],
                             "step": record["step"]}
  with open(os.path.join(model_dir, "metrics.json")) as f:
    assert json.load(f) == metrics
  best = model_dir_lib.choose_checkpoint(model_dir)
  assert (best.kind, best.step) == ("best", record["step"])
  assert os.path.dirname(best.path) == os.path.join(model_dir, "best")
  # A rerun trains no further: its patience is still spent.
  again = audioclf.train(more)
  assert (again["steps"], again["stopped_early"]) == (metrics["steps"], True)
  assert model_dir_lib.best_record(model_dir)["evaluations"] == record["evaluations"]
  # More patience trains on from where it stopped (the latest checkpoint; best/ is never read).
  on = audioclf.train(more.replace(early_stopping_patience=5, train_steps=metrics["steps"] + 10))
  assert on["steps"] == metrics["steps"] + 10 and not on["stopped_early"]
  assert [e["step"] for e in model_dir_lib.best_record(model_dir)["evaluations"]] == [
      *steps, metrics["steps"] + 10]


def _with_best_at(params, tmp_path, step):
  """A copy of a trained model_dir whose best/ holds its checkpoint of `step`."""
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  best_lib.Tracker(model_dir, "val_accuracy").update(
      step, {"accuracy": 1.0, "loss": 0.0}, os.path.join(model_dir, f"model.ckpt-{step}"))
  return model_dir


@pytest.mark.slow
def test_evaluate_predict_and_export_take_the_best(trained, tmp_path):
  params, _ = trained("keras")
  model_dir = _with_best_at(params, tmp_path, TRAIN_STEPS // 2)
  best, last = evaluate(model_dir, "test", report=False), evaluate(
      model_dir, "test", report=False, checkpoint="last")
  assert (best["checkpoint"], best["steps"]) == ("best", TRAIN_STEPS // 2)
  assert (last["checkpoint"], last["steps"]) == ("last", TRAIN_STEPS)
  assert best["loss"] != last["loss"]
  path = os.path.join(model_dir, f"model.ckpt-{TRAIN_STEPS // 2}")
  assert evaluate(model_dir, "test", report=False, checkpoint=path)["loss"] == best["loss"]
  with pytest.raises(model_dir_lib.ModelDirError, match="--checkpoint=nope: no such checkpoint"):
    evaluate(model_dir, "test", checkpoint="nope")

  sf_rate = params.sample_rate
  waves = np.stack([tone(f, 0.5, sf_rate, seed=i) for i, f in enumerate((300.0, 1452.0))])
  expected = {which: models.predict_fn(model_dir_lib.load_model(model_dir, checkpoint=which)[0])(
      waves) for which in ("best", "last")}
  assert not np.allclose(expected["best"], expected["last"])
  served = tf.saved_model.load(export(model_dir, str(tmp_path / "export")))
  np.testing.assert_allclose(served.signatures["serving_default"](
      waveform=tf.constant(waves))["probabilities"].numpy(), expected["best"], atol=1e-5)
  import soundfile as sf
  sf.write(tmp_path / "low.wav", waves[0], sf_rate)
  _, probs, _ = predict_lib.probabilities(model_dir, [str(tmp_path / "low.wav")])
  np.testing.assert_allclose(probs[0], expected["best"][0], atol=1e-5)


@pytest.mark.slow
def test_commands_say_which_checkpoint_they_used(trained, tmp_path):
  params, _ = trained("keras")
  model_dir = _with_best_at(params, tmp_path, TRAIN_STEPS // 2)
  import soundfile as sf
  clip = str(tmp_path / "clip.wav")
  sf.write(clip, tone(1452.0, 0.5, params.sample_rate), params.sample_rate)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

  def last_line(*args):
    proc = warm.run([sys.executable, "-m", "audioclf", *args], cwd=ROOT, env=env,
                    capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])

  runs = [(("evaluate", "--split=test"), "best", TRAIN_STEPS // 2),
          (("predict", clip), "best", TRAIN_STEPS // 2),
          (("export", f"--export_dir={tmp_path / 'export'}"), "best", TRAIN_STEPS // 2),
          (("evaluate", "--split=test", "--checkpoint=last"), "last", TRAIN_STEPS)]
  for (command, *args), which, step in runs:
    line = last_line(command, f"--model_dir={model_dir}", *args)
    assert (line["checkpoint"], line["steps"]) == (which, step), command
