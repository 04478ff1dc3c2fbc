"""--model=speech_embedding through the command line: train (both engines), evaluate, predict, export, tune, migrate."""

import json
import os
import re

import numpy as np
import pytest

import audioclf as audioclf_lib
from audioclf.migration import parity
from audioclf.model import model_dir as model_dir_lib
from conftest import ENGINES, write_tone_dataset
from test_tflite import tensor_kinds
from test_your_model import ROOT, audioclf, last_json
import warm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_flags(tmp_path_factory):
  """Flags for a small tone dataset of 1 s clips, at the preset's model and a few steps."""
  root = tmp_path_factory.mktemp("speech_embedding")
  data = write_tone_dataset(root / "data", per_label=12, seconds=1.0)
  return root, ["--preset=pretrained_speech", f"--data_dir={data}",
                f"--cache_dir={root / 'cache'}", "--batch_size=8", "--validation_percent=25",
                "--testing_percent=25", "--noise_prob=0", "--train_steps=6",
                "--eval_every_steps=6", "--log_every_steps=3", "--keep_best=none"]


@pytest.mark.parametrize("engine", ENGINES)
def test_trains_evaluates_and_exports_int8(data_flags, engine):
  root, flags = data_flags
  model_dir = str(root / f"run_{engine}")
  trained = last_json(audioclf("train", *flags, f"--engine={engine}",
                               f"--model_dir={model_dir}", "--model_args=trainable=last1"))
  assert trained["steps"] == 6 and trained["model"] == "speech_embedding"
  data_dir = flags[1].split("=", 1)[1]
  evaluated = last_json(audioclf("evaluate", f"--model_dir={model_dir}", "--split=test",
                                 f"--cache_dir={root / 'cache'}"))
  assert 0 <= evaluated["accuracy"] <= 1 and evaluated["files"] > 0
  predicted = audioclf("predict", f"--model_dir={model_dir}", os.path.join(data_dir, "low"))
  assert len(predicted) == 13  # A line per clip, then the summary.
  exported = last_json(audioclf("export", f"--model_dir={model_dir}", "--format=tflite",
                                "--quantize=int8", f"--cache_dir={root / 'cache'}",
                                "--calibration_clips=16"))
  _, kinds = tensor_kinds(os.path.join(exported["export_dir"], "model_int8.tflite"))
  # The embedding's first conv stays float, the layers after it are int8. (Constants the
  # layers share, such as the activation's, keep the first one's name: not a test of it.)
  first_conv = re.compile(r"/embedding0(_\d+)?/Conv2D$")
  assert any(first_conv.search(name) for name in kinds[np.float32])
  assert not any(first_conv.search(name) for name in kinds.get(np.int8, []))
  assert any("/embedding1" in name and "Conv2D" in name for name in kinds.get(np.int8, []))
  saved = last_json(audioclf("export", f"--model_dir={model_dir}", "--format=saved_model"))
  assert os.path.isfile(os.path.join(saved["export_dir"], "saved_model.pb"))


def test_tunes_its_own_search_space(data_flags):
  root, flags = data_flags
  tuned = last_json(audioclf("tune", *flags, f"--model_dir={root / 'tune'}", "--max_trials=2", "--trial_steps=4",
                             "--tuner=random"))
  searched = json.dumps(tuned)
  assert "trainable" in searched and "head" in searched


@pytest.mark.current_only
def test_a_fine_tuned_legacy_model_dir_migrates_to_keras_3(data_flags, tmp_path):
  """The Estimator trains it on the legacy stack; migrate --report runs that stack again."""
  python = parity.legacy_python()
  if not python:
    pytest.skip("no legacy stack's Python (.venv-legacy, or $AUDIOCLF_LEGACY_PYTHON)")
  root, flags = data_flags
  legacy, to = str(tmp_path / "legacy"), str(tmp_path / "migrated")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = warm.run([python, "-m", "audioclf", "train", *flags, "--engine=estimator",
                   f"--model_dir={legacy}", "--model_args=head=conv,width=8,trainable=last1"],
                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  migrated = last_json(audioclf("migrate", f"--from_model_dir={legacy}", f"--to_model_dir={to}",
                                "--report", f"--legacy_python={python}", flags[1], flags[2]))
  assert migrated["steps"] == 6 and migrated["optimizer_state"] == "carried"
  assert migrated["report"]["max_abs_difference"] <= 1e-5
  params = model_dir_lib.read_params(to).replace(train_steps=8)
  assert audioclf_lib.train(params)["steps"] == 8  # Keras 3 trains on from the carried state.
