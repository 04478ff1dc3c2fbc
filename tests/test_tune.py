"""Tests of audioclf.tune: a few tiny keras-tuner searches on tone data in a temporary folder."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import types

import pytest
from absl import flags

from audioclf.data import pipeline
from audioclf import params as params_lib
from audioclf.commands import flags as command_flags
from audioclf.data import manifest as manifest_lib
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import Params
from audioclf.tuning import search as tune_lib
from audioclf.tuning import trials as trials_lib
from audioclf.tuning import tuners as tuners_lib
from audioclf.tuning.hypermodel import AudioHyperModel
from conftest import write_tone_dataset
import warm


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _params(root, **changes) -> Params:
  """Trials that cost little more than building the model: short clips, narrow models."""
  data = write_tone_dataset(os.path.join(root, "data"), per_label=10)
  return Params(data_dir=data, cache_dir=os.path.join(root, "cache"),
                tune_dir=os.path.join(root, "tune"), validation_percent=30.0,
                sample_rate=8000, clip_seconds=0.25, n_mels=16, fmax=3800.0,
                model_args={"width": 8}, batch_size=8, trial_steps=4, trial_epochs=2, max_trials=3,
                tuner="random").replace(**changes)


def _quiet_tune(params: Params) -> tuple[dict, str]:
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    summary = tune_lib.tune(params)
  return summary, out.getvalue()


@pytest.fixture(scope="module")
def search(tmp_path_factory):
  """One random search of three trials on a cold cache, shared by the tests below."""
  root = tmp_path_factory.mktemp("search")
  params = _params(root)
  manifest = manifest_lib.load(params)
  gradients = set(_gradient_registry())
  summary, printed = _quiet_tune(params)
  leaked = sorted(set(_gradient_registry()) - gradients)
  return types.SimpleNamespace(params=params, manifest=manifest, summary=summary,
                               printed=printed, leaked=leaked)


def _gradient_registry():
  from tensorflow.python.framework import ops  # pylint: disable=g-import-not-at-top
  return ops._gradient_registry._registry  # pylint: disable=protected-access


def _has_tag(log_dir, tag):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for path in tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      if any(value.tag == tag for value in event.summary.value):
        return True
  return False


def _records(tune_dir):
  project = os.path.join(tune_dir, trials_lib.PROJECT)
  return {name[len("trial_"):]: json.load(open(os.path.join(project, name, trials_lib.TRIAL_RECORD)))
          for name in sorted(os.listdir(project)) if name.startswith("trial_")}


@pytest.mark.slow
def test_each_file_is_decoded_once_and_no_trial_decodes(search):
  params, summary = search.params, search.summary
  splits = search.manifest.counts()
  assert summary["trials_run"] == summary["trials"] == summary["completed"] == 3
  # Train and validation, each file once, before the first trial; never the test split.
  assert summary["decoded"] == splits["train"] + splits["validation"]
  records = _records(params.tune_dir)
  assert sorted(records) == ["0", "1", "2"]
  assert [r["decoded"] for r in records.values()] == [0, 0, 0]
  # Each trial trained through the engine's loop: its clock and stall meter report.
  for record in records.values():
    assert record["examples_per_sec"] > 0
    assert 0.0 <= record["input_stall"] <= 1.0


@pytest.mark.slow
def test_search_prints_table_and_writes_tensorboard_and_best_model(search):
  params, summary = search.params, search.summary
  table = search.printed[search.printed.index("trial  status"):].splitlines()
  assert len(table) == 1 + 3
  best = summary["best_trial"]
  assert [line.split()[0] for line in table[1:]] == [t + ("*" if t == best else "") for t in "012"]
  assert all(" COMPLETED " in line for line in table[1:])
  for trial in "012":
    logs = os.path.join(params.tune_dir, "tb", trial, "execution0")
    assert any(name.startswith("events.out.tfevents")
               for _, _, files in os.walk(logs) for name in files), logs
    assert _has_tag(os.path.join(logs, "train"), "input/stall_fraction")

  from audioclf.deploy.evaluate import evaluate  # pylint: disable=g-import-not-at-top
  best_model = summary["best_model"]
  assert best_model == os.path.join(params.tune_dir, "best_model")
  assert model_dir_lib.read_labels(best_model) == ["high", "low", "mid"]
  metrics = json.load(open(os.path.join(best_model, "metrics.json")))
  assert metrics["trial"] == best
  assert metrics["val_accuracy"] == summary["best_val_accuracy"]
  # The saved weights are the best epoch's: they score what the trial reported.
  assert evaluate(best_model)["accuracy"] == pytest.approx(summary["best_val_accuracy"], abs=1e-6)


def test_best_flags_round_trip_to_the_best_trials_params(search, tmp_path):
  params, summary = search.params, search.summary
  # A trial is a training run of trial_steps, evaluated after each of its epochs.
  expected = params.replace(**summary["best_hyperparameters"], train_steps=4, eval_every_steps=2)
  flag_values = flags.FlagValues()
  command_flags.define_flags(flag_values)
  flag_values(["train", f"--flagfile={summary['best_flags']}"])
  assert command_flags.params_from_flags(flag_values) == expected
  saved = Params.from_json(os.path.join(summary["best_model"], "params.json"))
  assert saved == expected.replace(model_dir=summary["best_model"])

  from audioclf.engines.train import train  # pylint: disable=g-import-not-at-top
  metrics = train(expected.replace(model_dir=str(tmp_path / "retrain")))
  assert metrics["steps"] == 4
  assert os.path.isfile(tmp_path / "retrain" / "metrics.json")


@pytest.mark.slow
def test_rerun_resumes_and_a_larger_max_trials_extends(search, tmp_path):
  params, summary = search.params, search.summary
  tune_dir = str(tmp_path / "tune")
  shutil.copytree(params.tune_dir, tune_dir)
  params = params.replace(tune_dir=tune_dir)
  checkpoint = os.path.join(tune_dir, "best_model", "checkpoint")
  os.utime(checkpoint, (0, 0))

  again, _ = _quiet_tune(params)
  assert again["trials_run"] == 0 and again["trials"] == 3
  assert again["decoded"] == 0
  assert again["best_trial"] == summary["best_trial"]
  assert again["best_hyperparameters"] == summary["best_hyperparameters"]
  assert os.path.getmtime(checkpoint) == 0  # The same best model, kept as it was.

  decoded = pipeline.PROCESS.decodes.count
  more, _ = _quiet_tune(params.replace(max_trials=4))
  assert more["trials_run"] == 1 and more["trials"] == 4
  assert sorted(_records(tune_dir)) == ["0", "1", "2", "3"]
  # A fourth trial, perhaps at a new batch size or model, still reads the cache.
  assert pipeline.PROCESS.decodes.count == decoded
  assert _records(tune_dir)["3"]["decoded"] == 0


def test_trials_leave_no_graph_behind(search):
  # Each traced train step registers a gradient function that holds its whole
  # graph, for good (see tune._forget_custom_gradients); the trials must drop
  # theirs, or memory grows with every trial.
  assert search.leaked == []


def test_a_search_state_cut_off_mid_write_keeps_the_last_whole_one(tmp_path, monkeypatch):
  # keras-tuner writes oracle.json and trial.json by truncating, then writing;
  # a kill in between would leave an empty file the rerun cannot read.
  import keras_tuner as kt  # pylint: disable=g-import-not-at-top
  params = _params(tmp_path)
  tuners_lib.make_tuner(params, AudioHyperModel(params, manifest_lib.load(params)),
                        str(tmp_path / "tune"))
  trial = kt.engine.trial.Trial(kt.HyperParameters(), trial_id="7")
  path = str(tmp_path / "trial.json")
  trial.save(path)

  def killed(*_):  # Once the new bytes are written, before they take the old file's place.
    raise KeyboardInterrupt
  monkeypatch.setattr(os, "replace", killed)
  trial.status = "COMPLETED"
  with pytest.raises(KeyboardInterrupt):
    trial.save(path)
  monkeypatch.undo()
  assert kt.engine.trial.Trial.load(path).status == "RUNNING"
  assert sorted(os.listdir(tmp_path)) == ["data", "trial.json", "tune"]  # No temporary left.


def test_hyperband_budget_counts_keras_tuner_schedule():
  # trial_epochs=3, factor 3: 3 trials of 1 epoch, the best continued for 2
  # more, and 2 trials of 3 epochs: 11 epochs, 11/3 full trials a sweep.
  assert tuners_lib.hyperband_iterations(Params(max_trials=11, trial_epochs=3)) == 3
  assert tuners_lib.hyperband_iterations(Params(max_trials=1, trial_epochs=3)) == 1


def test_bad_search_settings_fail_before_reading_data(tmp_path):
  params = Params(data_dir=str(tmp_path / "missing"), tune_dir=str(tmp_path / "tune"))
  with pytest.raises(ValueError, match="--tuner=grid: must be one of random, hyperband"):
    tune_lib.tune(params.replace(tuner="grid"))
  with pytest.raises(ValueError, match="--trial_epochs=0: must be >= 1"):
    tune_lib.tune(params.replace(trial_epochs=0))
  with pytest.raises(ValueError, match="--tune_dir: must be set, or --model_dir"):
    tune_lib.tune(params.replace(tune_dir=None))


@pytest.mark.slow
def test_hyperband_continues_promoted_trials(tmp_path):
  summary, _ = _quiet_tune(_params(tmp_path, tuner="hyperband", trial_epochs=3, max_trials=1))
  assert summary["trials"] == summary["completed"] == 6
  project = os.path.join(summary["tune_dir"], trials_lib.PROJECT)
  values = [json.load(open(os.path.join(project, f"trial_{i:04d}", "trial.json")))
            ["hyperparameters"]["values"] for i in range(6)]
  assert sorted(v["tuner/epochs"] for v in values) == [1, 1, 1, 3, 3, 3]
  promoted = [v for v in values if "tuner/trial_id" in v]
  assert len(promoted) == 1 and promoted[0]["tuner/initial_epoch"] == 1


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The optimal value found")  # Few points for the GP's fit.
def test_bayesian_search(tmp_path):
  summary, _ = _quiet_tune(_params(tmp_path, tuner="bayesian", max_trials=3))
  # Two random trials, then one the Gaussian process proposes.
  assert summary["trials"] == summary["completed"] == 3
  assert 0.0 <= summary["best_val_accuracy"] <= 1.0


@pytest.mark.slow
def test_command_line_search_resumes_after_a_kill_then_trains_on_best_flags(tmp_path):
  params = _params(tmp_path, max_trials=2)
  flagfile = tmp_path / "search.flags"
  params_lib.to_flagfile(params, str(flagfile))
  command = [sys.executable, "-m", "audioclf", "tune", f"--flagfile={flagfile}"]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  project = os.path.join(params.tune_dir, trials_lib.PROJECT)

  # Kill the search as soon as keras-tuner has recorded the second trial as started.
  with open(tmp_path / "killed.log", "w") as log:
    proc = warm.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    started = os.path.join(project, "trial_1", "trial.json")
    deadline = time.monotonic() + 240
    while not os.path.exists(started) and proc.poll() is None and time.monotonic() < deadline:
      time.sleep(0.05)
    proc.kill()
    proc.wait()
  assert json.load(open(started))["status"] == "RUNNING"
  first = open(os.path.join(project, "trial_0", "trial.json")).read()

  done = warm.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=True,
                  timeout=300)
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  # Only the interrupted trial ran again; the finished one was kept as it was.
  assert summary["trials_run"] == 1 and summary["trials"] == summary["completed"] == 2
  assert open(os.path.join(project, "trial_0", "trial.json")).read() == first
  assert summary["decoded"] == 0  # The killed run had filled the cache.

  done = warm.run([sys.executable, "-m", "audioclf", "train",
                   f"--flagfile={summary['best_flags']}",
                   f"--model_dir={tmp_path / 'retrain'}", "--train_steps=2"],
                  env=env, cwd=REPO, capture_output=True, text=True, check=True,
                  timeout=300)
  assert json.loads(done.stdout.strip().splitlines()[-1])["steps"] == 2
