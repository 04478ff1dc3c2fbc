"""Shared fixtures: seeds, tiny audio datasets written with soundfile in tmp_path, and the stack markers.

A test that only one stack can run says so with a marker, and is skipped on
the other with the reason in pytest's summary (`-rs`), never dropped:

  @pytest.mark.legacy_only    needs tf.estimator or Keras 2 (Python 3.11, TF 2.15)
  @pytest.mark.current_only   needs Keras 3 (Python 3.12+, TF >= 2.20)
  @pytest.mark.once           a slow check of what no stack changes: where tools/test.sh tests the
                              current stack too, the legacy stack skips it

ENGINES parametrizes a test over the engines, the Estimator marked legacy_only.
"""

from __future__ import annotations

import os
import random
import signal
import sys

import numpy as np
import pytest
import soundfile as sf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread per op in the tests and the commands they start: tools/test.sh runs a worker per
# core already, and the tests' models are small enough that splitting an op costs more than it
# saves (2026-12-03, 2 cores, alternating runs of six long files on two workers: 151 and 156 CPU
# seconds against 166 and 186; one worker: 84 s against 100-120 s). tf.data's own threads stay.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# Ctrl-C reaches the tests' processes as it reaches a terminal's, however the suite was started:
# a shell without job control starts a background job with SIGINT ignored, every process inherits
# that, and Python then never raises KeyboardInterrupt (tests/test_exit.py's Ctrl-C tests hung,
# and a training run went on to the end, when tools/test.sh ran as `(bash tools/test.sh &)`).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
  signal.signal(signal.SIGINT, signal.default_int_handler)
# The content-fingerprint memo lives per host (audioclf.data.keys); tests keep
# theirs apart from the user's, in one folder per test session.
_FINGERPRINTS_DIR = None
if "AUDIOCLF_FINGERPRINTS" not in os.environ:
  import tempfile
  _FINGERPRINTS_DIR = tempfile.mkdtemp(prefix="audioclf-tests-")
  os.environ["AUDIOCLF_FINGERPRINTS"] = os.path.join(_FINGERPRINTS_DIR, "fingerprints.sqlite3")


def pytest_sessionstart(session):
  # The warm interpreter that the tests' subprocesses are forked from (tests/warm.py) imports
  # TensorFlow while the first tests run; xdist's controller runs no test, so none there.
  config = session.config
  if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
    import warm
    warm.start()


def pytest_unconfigure(config):
  # The session's memo goes with it (subprocesses of the tests shared it until now).
  if _FINGERPRINTS_DIR is not None:
    import shutil
    shutil.rmtree(_FINGERPRINTS_DIR, ignore_errors=True)
  # As a command does (audioclf.commands.cli): the interpreter's last collections skip what the
  # tests left alive, 2-3 s of each test process's exit.
  import gc
  gc.freeze()

ENGINES = ("keras", pytest.param("estimator", marks=pytest.mark.legacy_only))
# A command-line check of an Estimator's model_dir where the stack has one, else of a Keras
# one: exactly one of the two runs on each stack.
ESTIMATOR_ELSE_KERAS = (pytest.param("estimator", marks=pytest.mark.legacy_only),
                        pytest.param("keras", marks=pytest.mark.current_only))


def pytest_collection_modifyitems(config, items):
  from audioclf import compat
  here = (f"this is the {compat.STACK} stack (TensorFlow {compat.TF_VERSION[0]}."
          f"{compat.TF_VERSION[1]}, Keras {compat.keras.__version__})")
  skips = {
      "legacy_only": None if compat.ESTIMATOR else pytest.mark.skip(
          reason=f"needs the legacy stack (tf.estimator, Keras 2; tools/test.sh runs it in "
                 f".venv-legacy where Python 3.11 exists): {here}"),
      "current_only": None if compat.KERAS3 else pytest.mark.skip(
          reason=f"needs the current stack (Keras 3; tools/test.sh runs it in .venv where "
                 f"Python 3.12 or 3.13 exists): {here}"),
      # Run alone (plain pytest, or one stack), it runs here too.
      "once": None if compat.KERAS3 or "current" not in os.environ.get(
          "AUDIOCLF_TESTED_STACKS", "").split() else pytest.mark.skip(
              reason="checks what no stack changes: this run's current stack covers it"),
  }
  for item in items:
    for marker, skip in skips.items():
      if skip is not None and marker in item.keywords:
        item.add_marker(skip)
  _longest_files_first(items)


# The files that take longest, longest first: seconds of their tests on the current stack, as
# tests/gc_probe.py recorded them in two runs of tools/test.sh on a 2-core machine (2026-12-02;
# 147/104 s for test_migrate.py down to 25 s for test_augment.py). A scheduling hint, no more.
_LONGEST = ("test_migrate.py", "test_cluster_keras.py", "test_zoo.py", "test_tune.py",
            "test_report.py", "test_docs.py", "test_your_model.py", "test_exit.py",
            "test_migrate_foreign.py", "test_migrate_named.py", "test_segments.py",
            "test_synthesize.py",
            "test_pipeline.py", "test_engines.py", "test_best.py", "test_augment.py")


def _longest_files_first(items):
  """Orders the files longest first (_LONGEST, then by how many slow tests each holds), each file's tests kept in order.

  tools/test.sh hands whole files to its workers in this order
  (--no-loadscope-reorder: xdist's own order is by number of tests, which
  left test_docs' one test of a minute and test_your_model for the end): the
  long ones start at once and the short ones fill the end, so no worker
  idles there while the other finishes a long file (40-47 s apart before).
  """
  slow = {}
  for item in items:
    slow[item.path] = slow.get(item.path, 0) + ("slow" in item.keywords)
  rank = {name: i for i, name in enumerate(_LONGEST)}
  items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -slow[item.path]))


@pytest.fixture(autouse=True)
def _seed_everything():
  import tensorflow as tf
  random.seed(0)
  np.random.seed(0)
  tf.random.set_seed(0)


def tone(freq: float, seconds: float, sample_rate: int, channels: int = 1, noise: float = 0.05,
         seed: int = 0) -> np.ndarray:
  """A sine at `freq` with a little white noise, float32 [frames] or [frames, channels]."""
  rng = np.random.default_rng(seed)
  t = np.arange(int(round(seconds * sample_rate))) / sample_rate
  x = 0.5 * np.sin(2 * np.pi * freq * t) + noise * rng.standard_normal(t.shape)
  x = x.astype(np.float32)
  if channels > 1:
    x = np.stack([x * (1.0 - 0.1 * c) for c in range(channels)], axis=1)
  return x


def write_tone_dataset(root, labels=("low", "mid", "high"), per_label=12, sample_rate=16000,
                       seconds=0.5, freqs=None, ext="wav", subtype="PCM_16"):
  """Writes <root>/<label>/spk<i>_nohash_0.<ext>: one tone frequency per label.

  Returns:
    The root folder as a str.
  """
  root = str(root)
  freqs = freqs or {lab: 300.0 * (2.2 ** i) for i, lab in enumerate(labels)}
  for label in labels:
    os.makedirs(os.path.join(root, label), exist_ok=True)
    for i in range(per_label):
      # Speaker ids vary per clip so the hash split puts clips of each label in every split.
      path = os.path.join(root, label, f"spk{i:03d}{label}_nohash_0.{ext}")
      freq = freqs[label] * (1.0 + 0.02 * (i % 5))
      sf.write(path, tone(freq, seconds, sample_rate, seed=i), sample_rate, subtype=subtype)
  return root


# The Estimators a team's own code built (tests/fixtures/foreign), and their builders' module.
FOREIGN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "foreign")


@pytest.fixture
def team_models(monkeypatch):
  """tests/fixtures/foreign's team_models, imported afresh and forgotten after.

  tests/test_registry.py writes a module of that name of its own.
  """
  monkeypatch.syspath_prepend(FOREIGN)
  sys.modules.pop("team_models", None)
  yield "team_models"
  sys.modules.pop("team_models", None)


class FakeTime:
  """A clock for StepClock and StallMeter that moves only when a test moves it.

  Steps then last exactly what the test says, however loaded the machine:

    now = FakeTime()
    clock = StepClock(clock=now)
    clock.begin_step(); now.advance(0.25); clock.end_step()   # clock.seconds == 0.25
  """

  def __init__(self, start: float = 0.0):
    self.seconds = start

  def __call__(self) -> float:
    return self.seconds

  def advance(self, seconds: float) -> None:
    self.seconds += seconds


@pytest.fixture
def tone_data(tmp_path):
  """A 3-class tone dataset in tmp_path/data (16 kHz PCM16, 0.5 s, 12 clips a class)."""
  return write_tone_dataset(tmp_path / "data")


# --- Trained model_dirs, shared by the engine, evaluate/predict and export tests.

TRAIN_STEPS = 40  # Enough for both engines to tell the tones apart (>0.9) from the same seed.


@pytest.fixture(scope="session")
def tone_params(tmp_path_factory):
  """Params of a tiny, fast training run on a 3-tone dataset with every split filled."""
  from audioclf import Params
  root = tmp_path_factory.mktemp("tones")
  return Params(data_dir=write_tone_dataset(root / "data"), cache_dir=str(root / "cache"),
                validation_percent=25, testing_percent=25, clip_seconds=0.5, batch_size=8,
                model_args={"width": 8}, train_steps=TRAIN_STEPS, eval_every_steps=20, learning_rate=3e-3,
                lr_schedule="cosine", log_every_steps=10, seed=0)


@pytest.fixture(scope="session")
def trained(tone_params, tmp_path_factory):
  """trained(engine) -> (params, metrics): that engine's run on tone_params, trained once."""
  import audioclf
  runs = {}

  def get(engine):
    if engine not in runs:
      params = tone_params.replace(engine=engine,
                                   model_dir=str(tmp_path_factory.mktemp(engine) / "model"))
      runs[engine] = (params, audioclf.train(params))
    return runs[engine]

  return get
