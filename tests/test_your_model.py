"""A model of one's own (tools/examples/my_models.py), through every command line, on either stack.

Nothing in audioclf knows the model: it is named `my_models:tiny`, its module
found on PYTHONPATH, and trained by `tools/examples/my_model.flags` with the
data flags pointed at a small generated dataset.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from audioclf import compat
from audioclf.distributed import cluster
from conftest import ENGINES, tone, write_tone_dataset
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "tools", "examples")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "legacy")


# On the current stack, tests/test_docs.py runs docs/your_model.md: the same commands of this
# model (train, evaluate, predict, export, tune, launch), whose outputs it checks as these do.
ON_THE_PAGE = pytest.mark.skipif(
    compat.KERAS3, reason="on the current stack tests/test_docs.py checks these commands' "
                          "outputs as docs/your_model.md runs them")


def _env(**extra):
  path = os.pathsep.join(p for p in (EXAMPLES, os.environ.get("PYTHONPATH")) if p)
  return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2", **extra)


def audioclf(*args, timeout=300, quiet=False):
  """`python -m audioclf <args>` from the repository root -> its stdout's lines; must succeed.

  `quiet`: and write only audioclf's own lines ("audioclf: ...") on stderr.
  """
  try:
    proc = warm.run([sys.executable, "-m", "audioclf", *args], cwd=ROOT, env=_env(),
                    capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired as e:
    pytest.fail(f"audioclf {args[0]} did not end in {e.timeout} s: {e.stderr!r:.3000}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  if quiet:
    chatter = [line for line in proc.stderr.splitlines() if not line.startswith("audioclf: ")]
    assert not chatter, proc.stderr[-3000:]
  return proc.stdout.strip().splitlines()


def last_json(lines):
  return json.loads(lines[-1])


@pytest.fixture(scope="module")
def data_flags(tmp_path_factory):
  """The example's flagfile with its data flags on a small tone dataset of this module."""
  root = tmp_path_factory.mktemp("your_model")
  data = write_tone_dataset(root / "data", labels=("low", "mid", "high"), per_label=12)
  return root, ["--flagfile=tools/examples/my_model.flags", f"--data_dir={data}",
                f"--cache_dir={root / 'cache'}", "--clip_seconds=0.5", "--batch_size=8",
                "--validation_percent=25", "--testing_percent=25", "--noise_prob=0",
                "--model_args=blocks=1,width=8", "--learning_rate=0.01", "--log_every_steps=10"]


@pytest.fixture(scope="module")
def trained(data_flags):
  """train(engine) -> (model_dir, metrics): the example model trained 30 steps by that engine."""
  root, flags = data_flags
  runs = {}

  def get(engine):
    if engine not in runs:
      model_dir = str(root / f"run_{engine}")
      metrics = last_json(audioclf("train", *flags, f"--engine={engine}",
                                   f"--model_dir={model_dir}", "--train_steps=30",
                                   "--eval_every_steps=15"))
      runs[engine] = (model_dir, metrics)
    return runs[engine]

  return get


@pytest.mark.slow
@pytest.mark.parametrize("engine", (pytest.param("keras", marks=ON_THE_PAGE), *ENGINES[1:]))
def test_trains_evaluates_predicts_and_exports(trained, tmp_path, engine):
  model_dir, metrics = trained(engine)
  assert metrics["model"] == "my_models:tiny" and metrics["steps"] == 30
  with open(os.path.join(model_dir, "params.json")) as f:
    recorded = json.load(f)["model_args"]
  assert recorded == {"blocks": 1, "width": 8, "kernel": 3}  # Every argument, defaults too.
  evaluated = last_json(audioclf("evaluate", f"--model_dir={model_dir}", "--split=test"))
  assert evaluated["accuracy"] == pytest.approx(metrics["test_accuracy"])
  short, long = str(tmp_path / "short.wav"), str(tmp_path / "long.wav")
  sf.write(short, tone(1452.0, 0.5, 16000), 16000)
  sf.write(long, np.concatenate([tone(300.0, 1.0, 16000), tone(1452.0, 1.0, 16000)]), 16000)
  predicted = audioclf("predict", f"--model_dir={model_dir}", short, long)
  assert last_json(predicted)["clips"] == 1 and last_json(predicted)["long_files"] == 1
  exported = last_json(audioclf("export", f"--model_dir={model_dir}",
                                f"--export_dir={tmp_path / 'saved'}"))
  assert os.path.isfile(os.path.join(exported["export_dir"], "saved_model.pb"))
  tflite = last_json(audioclf("export", f"--model_dir={model_dir}", "--format=tflite",
                              "--quantize=int8", "--calibration_clips=16",
                              f"--export_dir={tmp_path / 'tflite'}"))
  int8 = tflite["variants"]["int8"]
  assert int8["agreement"] >= 0.9 and os.path.isfile(tmp_path / "tflite" / "model_int8.tflite")


@pytest.mark.slow
@ON_THE_PAGE
def test_tunes_the_models_own_space(data_flags):
  root, flags = data_flags
  summary = last_json(audioclf("tune", *flags, f"--tune_dir={root / 'tune'}", "--max_trials=2",
                               "--trial_steps=4", "--trial_epochs=2"))
  assert summary["completed"] == 2
  assert set(summary["best_hyperparameters"]["model_args"]) == {"blocks", "width"}


@pytest.mark.slow
@ON_THE_PAGE
def test_trains_on_two_workers(data_flags):
  root, flags = data_flags
  model_dir = str(root / "two_workers")
  summary = last_json(audioclf("launch", "--workers=2", "--", *flags, f"--model_dir={model_dir}",
                               "--train_steps=6", "--eval_every_steps=3", timeout=600))
  assert (summary["workers"], summary["steps"], summary["model"]) == (2, 6, "my_models:tiny")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_trains_from_a_tf_data_service_that_augments_quietly(data_flags, tmp_path, engine):
  root, flags = data_flags
  flagfile = tmp_path / "data.flags"
  flagfile.write_text("\n".join(flags) + "\n")
  port, worker_port = cluster.free_ports(2)
  servers = [warm.Popen([sys.executable, "-m", "audioclf", "service", *args,
                         "--allow_remote_clients"], cwd=ROOT, env=_env(),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for args in (["dispatcher", f"--port={port}"],
                          ["worker", f"--dispatcher=127.0.0.1:{port}", f"--port={worker_port}",
                           "--worker_host=127.0.0.1", f"--flagfile={flagfile}"])]
  try:
    said = []
    for line in iter(servers[1].stdout.readline, ""):  # Registered: its cache is full.
      said.append(line)
      if "registered" in line:
        break
    else:
      pytest.fail(f"the worker ended before it registered: {''.join(said)[-2000:]}")
    # The workers apply these: the trainer only receives finished batches.
    summary = last_json(audioclf("train", *flags, f"--engine={engine}",
                                 f"--model_dir={tmp_path / 'served'}", "--train_steps=6",
                                 "--eval_every_steps=6", "--speed_perturb=0.9,1.1",
                                 "--gain_db=-6,6", "--mixup_alpha=0.2",
                                 f"--data_service=grpc://127.0.0.1:{port}", quiet=True))
    assert summary["steps"] == 6 and summary["model"] == "my_models:tiny"
  finally:
    for server in servers:
      server.send_signal(signal.SIGTERM)
    for server in servers:
      try:
        server.wait(timeout=30)
      except subprocess.TimeoutExpired:
        server.kill()


@pytest.mark.slow
@pytest.mark.current_only
def test_a_legacy_model_dir_of_it_migrates_to_keras_3(tmp_path):
  # The legacy stack trained it (tools/make_legacy_fixtures.py); here only the current one runs.
  to = str(tmp_path / "migrated")
  record = last_json(audioclf("migrate", f"--from_model_dir={os.path.join(FIXTURES, 'my_model')}",
                              f"--to_model_dir={to}", "--report",
                              f"--legacy_probabilities={FIXTURES}/my_model_probabilities.npz",
                              f"--data_dir={FIXTURES}/clips"))
  assert record["optimizer_state"] == "carried" and record["report"]["max_abs_difference"] < 1e-5
