"""The Estimator's chief/worker/ps/evaluator cluster on loopback, started by `audioclf launch`."""

import json
import os
import subprocess
import sys

import pytest

from audioclf import Params
from audioclf import params as params_lib
import warm

pytestmark = pytest.mark.legacy_only  # The Estimator engine.


@pytest.mark.slow
def test_chief_worker_ps_and_evaluator_train_one_model(tone_params, tmp_path):
  # Enough steps that the worker, whose graph is built while the chief
  # already trains, takes part on a loaded 2-core machine.
  params = tone_params.replace(engine="estimator", model_dir=str(tmp_path / "model"),
                               train_steps=300, eval_every_steps=100, log_every_steps=100,
                               keep_best="val_loss")
  flagfile = str(tmp_path / "run.flags")
  params_lib.to_flagfile(params, flagfile)
  run = warm.run(
      [sys.executable, "-m", "audioclf", "launch", "--workers=2", "--ps=1", "--evaluator", "--",
       f"--flagfile={flagfile}"], capture_output=True, text=True, timeout=420,
      # Verbose: the evaluator's TensorFlow INFO lines say which checkpoints it evaluated.
      env=dict(os.environ, AUDIOCLF_VERBOSE="1"))
  assert run.returncode == 0, run.stderr[-3000:]
  # AUDIOCLF_VERBOSE=1 brings TensorFlow's lines back (quiet by default: test_engines), the
  # Estimator's INFO lines once each, in absl's format (TF's own handler would print them twice).
  assert "Calling model_fn." in run.stderr and "INFO:tensorflow:" not in run.stderr
  summary = json.loads(run.stdout.strip().splitlines()[-1])
  assert summary["task"] == "chief:0" and summary["workers"] == 2
  # Asynchronous steps: those the worker takes while the chief stops and saves still count.
  assert 300 <= summary["steps"] <= 310
  # A single-process run of these params reaches > 0.9 (test_engines): so must the cluster.
  assert summary["val_accuracy"] > 0.9 and summary["test_accuracy"] > 0.9
  with open(os.path.join(params.model_dir, "metrics.json")) as f:
    assert json.load(f) == summary  # The chief's, and only the chief's.
  assert Params.from_json(os.path.join(params.model_dir, "params.json")) == params
  # Every task ran and ended cleanly; the worker trained steps of its own.
  out = run.stdout + run.stderr
  worker_steps = [int(line.split(" ran ")[1].split()[0]) for line in out.splitlines()
                  if line.startswith("[worker:0]") and " training steps" in line]
  assert worker_steps and worker_steps[0] > 0, out[-3000:]
  evaluated = [json.loads(line.partition("] ")[2]) for line in run.stdout.splitlines()
               if line.startswith("[evaluator:0] {")]
  assert evaluated and evaluated[0]["steps"] >= 300 and evaluated[0]["val_accuracy"] > 0.9
  # The evaluator evaluated checkpoints as they appeared, not only the last:
  # one written mid-run (which of 100 and 200 it catches depends on when it
  # polls: on a quiet machine the chief saves them a second apart).
  steps = [int(line.split("Saving dict for global step ")[1].split(":")[0])
           for line in out.splitlines()
           if line.startswith("[evaluator:0]") and "Saving dict for global step " in line]
  assert any(0 < step < 300 for step in steps), steps
  # The evaluator kept the best of what it evaluated; the chief's summary read its record when
  # the chief finished (the evaluator may have evaluated the last checkpoint after that).
  from audioclf.model import model_dir as model_dir_lib  # pylint: disable=g-import-not-at-top
  record = model_dir_lib.best_record(params.model_dir)
  assert [e["step"] for e in record["evaluations"]] == sorted(set(steps))
  assert summary["best"]["metric"] == "val_loss" and summary["best"]["step"] in steps
  assert model_dir_lib.choose_checkpoint(params.model_dir).step == record["step"]
  assert "[launch] training is over; stopping the parameter servers" in run.stderr
  assert "[ps:0] " in run.stdout and "ps:0 stopped" in run.stderr
