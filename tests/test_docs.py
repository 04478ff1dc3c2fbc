"""The bring-your-own-model page (docs/your_model.md) runs as written, through tools/check_docs.py.

After tools/demo.sh, `python tools/check_docs.py` runs every page of the docs
on the demo's data. This test runs the page a new user follows first without
the demo: in a folder laid out like the repository (its venvs, flags/ and
tools/ linked) over a small generated stand-in for data/speech_words. On the
current stack its commands' outputs are what tests/test_your_model.py would
check of the same commands (that file checks them on the legacy stack).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from conftest import tone, write_tone_dataset
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENVS = (".venv", ".venv-legacy")
# The stand-in data's own settings, after each preset's lines: a page's commands run as written,
# each step a sixteenth of the demo's work (a quarter of the batch, half of each clip), and the
# page's own model trained a fifth as long.
STAND_IN = {os.path.join("flags", "demo.flags"): ("--batch_size=16", "--clip_seconds=0.5"),
            os.path.join("tools", "examples", "my_model.flags"): ("--train_steps=60",
                                                                  "--eval_every_steps=30")}


def _sandbox(root) -> str:
  for name in VENVS:  # Their servers import TensorFlow while the data is written.
    if os.path.isfile(os.path.join(ROOT, name, "bin", "python")):
      warm.start(_python(name))
  _stand_in(root, "flags")
  _stand_in(root, "tools")
  words = root / "data" / "speech_words"
  # 1 s clips as the demo's, enough for the stand-in batch in every split.
  write_tone_dataset(words, labels=("yes", "no", "up", "down"), per_label=24, seconds=1.0)
  # Clips of the stand-in's length, and a recording longer than a clip (predict goes through it
  # window by window).
  write_tone_dataset(words / "_held_out", labels=("yes",), per_label=2, seconds=0.5)
  sf.write(words / "_held_out" / "yes" / "long.wav", tone(600.0, 2.5, 16000), 16000)
  os.makedirs(words / "_background_noise_")
  sf.write(words / "_background_noise_" / "white.wav",
           np.random.default_rng(0).normal(0, 0.1, 48000).astype(np.float32), 16000)
  for name in VENVS:
    if not _warm_venv(root, name) and os.path.exists(os.path.join(ROOT, name)):
      os.symlink(os.path.join(ROOT, name), root / name)
  return str(root)


def _python(venv: str) -> str:
  """The repository's `venv`/bin/python; this interpreter where it is that one."""
  python = os.path.join(ROOT, venv, "bin", "python")
  return sys.executable if os.path.abspath(sys.executable) == python else python


def _warm_venv(root, name) -> bool:
  """root/<name>/bin/python: the repository's, forking each command from a server of it.

  Its commands start as the tests' own do (tests/warm.py): the current
  stack's from this test's server, the legacy stack's from one of its
  Python (still importing TensorFlow, maybe: its first command waits for it).
  False, and no such venv, where forking is off.
  """
  python = _python(name)
  server = os.path.isfile(python) and warm.start(python)
  if not server:
    return False
  socket = server.path
  os.makedirs(root / name / "bin")
  wrapper = root / name / "bin" / "python"
  wrapper.write_text(f"#!/bin/sh\n{warm.SOCKET_ENV}='{socket}' exec '{python}' '{warm.__file__}' "
                     "--client \"$@\"\n")
  wrapper.chmod(0o755)
  return True


def _stand_in(root, folder: str) -> None:
  """The repository's `folder` in root: links to its entries, the STAND_IN presets copied."""
  os.makedirs(root / folder)
  for name in os.listdir(os.path.join(ROOT, folder)):
    path = os.path.join(folder, name)
    if path in STAND_IN:
      with open(os.path.join(ROOT, path)) as f:
        (root / path).write_text(f.read() + "\n".join(STAND_IN[path]) + "\n")
    elif any(preset.startswith(path + os.sep) for preset in STAND_IN):
      _stand_in(root, path)
    else:
      os.symlink(os.path.join(ROOT, path), root / path)


@pytest.mark.slow
@pytest.mark.current_only  # The page names each command's venv: once is enough.
def test_the_your_model_page_runs_as_written(tmp_path):
  root = _sandbox(tmp_path)
  outputs = tmp_path / "outputs.jsonl"
  try:
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check_docs.py"),
                          "--pages", os.path.join(ROOT, "docs", "your_model.md"),
                          f"--root={root}", "--timeout_s=600", f"--outputs={outputs}"],
                         capture_output=True, text=True, timeout=1500)
  except subprocess.TimeoutExpired as e:
    pytest.fail(f"the page did not run in {e.timeout} s: {e.stdout!r:.3000}")
  assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
  assert "documented commands ran as written" in run.stdout
  ran = sum(line.startswith("ok ") for line in run.stdout.splitlines())
  legacy = os.path.exists(os.path.join(ROOT, ".venv-legacy", "bin", "python"))
  assert ran == (11 if legacy else 7), run.stdout
  _check_outputs(root, _last_json_lines(outputs))


def _last_json_lines(path) -> dict:
  """{(venv, command, and the flag that tells two of one command apart): its last line's JSON}."""
  results = {}
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      if record["stdout"].strip():
        words = record["command"].split()  # <venv>/bin/python -m audioclf <command> ...
        key = (words[0].split("/")[0], words[3] if len(words) > 3 else words[0],
               next((w for w in words if w.startswith(("--format", "--engine"))), ""))
        results[key] = json.loads(record["stdout"].strip().splitlines()[-1])
  return results


def _check_outputs(root: str, out: dict) -> None:
  """What each of the page's current-stack commands says is what the page promises."""
  trained = out[(".venv", "train", "")]
  assert trained["model"] == "my_models:tiny" and trained["steps"] == 60  # The stand-in's steps.
  with open(os.path.join(root, "runs", "my_model", "params.json")) as f:
    recorded = json.load(f)["model_args"]
  assert recorded == {"blocks": 3, "width": 16, "kernel": 3}  # Every argument, defaults too.
  assert out[(".venv", "evaluate", "")]["accuracy"] == pytest.approx(trained["test_accuracy"])
  predicted = out[(".venv", "predict", "")]
  assert (predicted["clips"], predicted["long_files"]) == (2, 1)
  exported = out[(".venv", "export", "")]
  assert os.path.isfile(os.path.join(root, exported["export_dir"], "saved_model.pb"))
  variants = out[(".venv", "export", "--format=tflite")]["variants"]
  # The page's default calibration on a model of 60 steps: int8 within a few of ~12 test clips.
  assert variants["int8"]["agreement"] >= 0.75, variants
  assert variants.get("none", {"agreement": 1.0})["agreement"] == 1.0, variants
  tuned = out[(".venv", "tune", "")]
  assert tuned["completed"] == 2
  assert set(tuned["best_hyperparameters"]["model_args"]) == {"blocks", "width"}
  launched = out[(".venv", "launch", "")]
  assert (launched["workers"], launched["steps"], launched["model"]) == (2, 20, "my_models:tiny")
