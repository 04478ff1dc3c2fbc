"""Commands end an error a user can fix with one line, `audioclf: error: ...`, and exit status 1."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import tensorflow as tf

from audioclf.commands import cli
from audioclf.data import decode
from audioclf.data import manifest
from audioclf.model import model_dir
from audioclf.params import ParamError, Params
from conftest import tone
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAD_AUDIO_IN_TF = ("Graph execution error:\n\nDetected at node PyFunc defined at (most recent call "
                   "last):\n<stack traces unavailable>\nBadAudioError: audioclf: bad audio file "
                   "\"/d/it's.flac\": Error : flac decoder lost sync.\nTraceback (most recent call "
                   "last):\n  File \"decode.py\", line 43\n\t [[{{node PyFunc}}]]")

FULL_CACHE_IN_TF = ("Graph execution error:\n\nDetected at node PyFunc defined at (most recent "
                    "call last):\n<stack traces unavailable>\nCacheWriteError: audioclf: cannot "
                    "write the cache in /c: No space left on device (free space there, or point "
                    "--cache_dir at another disk)\nTraceback (most recent call last):\n  File "
                    "\"store.py\", line 75\n\t [[{{node PyFunc}}]]")


@pytest.mark.parametrize("error, line", [
    (ParamError("--batch_size=0: must be >= 1"), "--batch_size=0: must be >= 1"),
    (manifest.DataError("m.csv:3: not UTF-8 text"), "m.csv:3: not UTF-8 text"),
    (model_dir.ModelDirError("'m' holds no params.json"), "'m' holds no params.json"),
    (decode.BadAudioError("/d/a.wav", "holds no audio frames"),
     "bad audio file '/d/a.wav': holds no audio frames"),
    (FileNotFoundError("no such file or folder: 'x.wav'"), "no such file or folder: 'x.wav'"),
    (tf.errors.InvalidArgumentError(None, None, BAD_AUDIO_IN_TF),
     "bad audio file \"/d/it's.flac\": Error : flac decoder lost sync."),
    (tf.errors.UnknownError(None, None, BAD_AUDIO_IN_TF),
     "bad audio file \"/d/it's.flac\": Error : flac decoder lost sync."),
    (tf.errors.UnknownError(None, None, FULL_CACHE_IN_TF),
     "cannot write the cache in /c: No space left on device (free space there, or point "
     "--cache_dir at another disk)"),
    (tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [8] vs. [4]"), None),
    (ValueError("a bug"), None),
    (KeyError("val_loss"), None),
])
def test_user_errors_become_one_line_and_others_keep_their_traceback(error, line):
  assert cli.user_error(error) == line


def run_command(verb, *args, **env):
  """`python -m audioclf <verb> args` -> (returncode, stderr); fails the test if it does not end.

  TensorFlow's log level is the command's own default, as a user meets it.
  """
  env = dict(os.environ, **env)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  try:
    proc = warm.run([sys.executable, "-m", "audioclf", verb, *args], cwd=ROOT, env=env,
                    capture_output=True, text=True, timeout=300)
  except subprocess.TimeoutExpired as e:
    pytest.fail(f"python -m audioclf {verb} did not end in {e.timeout} s: {e.stderr!r:.3000}")
  return proc.returncode, proc.stderr


def assert_one_error_line(returncode, stderr, line):
  """The error line ends stderr, and nothing before it repeats its cause or comes from a failure."""
  assert returncode == 1, stderr[-3000:]
  assert stderr.rstrip("\n").splitlines()[-1] == f"audioclf: error: {line}", stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  # TensorFlow's op warnings, a thread's error log: each of them repeated the cause.
  assert stderr.count(line) == 1, stderr[-3000:]
  assert not re.search(r"^([WE]\d{4} |\d{4}-\d\d-\d\d [\d:.]+: [WE] )", stderr, re.MULTILINE), \
      stderr[-3000:]


@pytest.mark.parametrize("make, flag, line", [
    (lambda tmp: None, "--eval_every_steps=-1",
     "--eval_every_steps=-1: must be >= 0 (0 evaluates once, at the end)"),
    (lambda tmp: None, "--resample_quality=XX",
     "--resample_quality=XX: must be one of QQ, LQ, MQ, HQ, VHQ"),
    (lambda tmp: (tmp / "m.csv").write_bytes(b"path,label\ncaf\xe9.wav,a\n"), "--manifest={tmp}/m.csv",
     "{tmp}/m.csv:2: not UTF-8 text (byte 0xe9); save it as UTF-8"),
])
@pytest.mark.slow
def test_a_bad_flag_or_source_ends_train_in_one_line(tmp_path, make, flag, line):
  make(tmp_path)
  source = [] if "manifest" in flag else [f"--data_dir={tmp_path}"]
  returncode, stderr = run_command("train", *source, f"--model_dir={tmp_path}/model",
                                   flag.format(tmp=tmp_path))
  assert_one_error_line(returncode, stderr, line.format(tmp=tmp_path))
  assert not os.path.exists(tmp_path / "model")


@pytest.mark.slow
def test_a_batch_larger_than_the_split_ends_train_in_one_line(tmp_path):
  from conftest import write_tone_dataset  # pylint: disable=g-import-not-at-top
  data = write_tone_dataset(tmp_path / "data", per_label=4)
  n = len(manifest.load(Params(data_dir=data, validation_percent=30, testing_percent=0))
          .split("train"))
  returncode, stderr = run_command("train", f"--data_dir={data}", f"--model_dir={tmp_path}/m",
                                   f"--cache_dir={tmp_path}/cache", "--batch_size=1000",
                                   "--validation_percent=30", "--testing_percent=0")
  assert_one_error_line(returncode, stderr, f"--batch_size=1000: must be at most {n}, the "
                        f"examples of the 'train' split of {data} ({n})")


@pytest.mark.slow
def test_the_traceback_is_there_on_request(tmp_path):
  returncode, stderr = run_command("train", f"--data_dir={tmp_path}", "--batch_size=0",
                                   AUDIOCLF_TRACEBACK="1")
  assert returncode == 1
  assert "Traceback" in stderr and "ParamError: --batch_size=0: must be >= 1" in stderr


FROZEN_AT_EXIT = """
import atexit, gc
from audioclf.commands import cli
before = gc.get_freeze_count()  # A forked process starts with its server's frozen.
# Registered before the command's own hooks, so it runs after them (atexit runs in reverse).
atexit.register(lambda: print(gc.get_freeze_count() - before, flush=True))
made = []

def main(argv):
  made.extend({"n": [i]} for i in range(10000))  # Alive at exit, tracked by the collector.

cli.run(main, ["prog"])
"""


def test_a_command_exits_without_the_interpreters_final_collections_walking_its_objects():
  # Python collects garbage twice as it ends, through every object alive (1.2 s of an
  # evaluate's 5-6 s); a command leaves those to the end of the process instead.
  run = warm.run([sys.executable, "-c", FROZEN_AT_EXIT], capture_output=True, text=True,
                 timeout=120)
  assert run.returncode == 0, run.stderr[-2000:]
  assert int(run.stdout.split()[-1]) >= 20000  # The command's objects, frozen at the end.


def truncated_flac_dataset(tmp_path):
  """A CSV manifest of two labels of tones, and a FLAC cut in half among the training files."""
  rows = ["path,label,split"]
  for label, freq in (("a", 440.0), ("b", 1200.0)):
    os.makedirs(tmp_path / label)
    for i, split in enumerate(("train", "train", "validation", "validation")):
      sf.write(str(tmp_path / label / f"{i}.wav"), tone(freq, 0.5, 16000, seed=i), 16000)
      rows.append(f"{label}/{i}.wav,{label},{split}")
  sf.write(str(tmp_path / "whole.flac"), np.random.default_rng(0).uniform(-0.5, 0.5, 16000), 16000)
  flac = (tmp_path / "whole.flac").read_bytes()
  (tmp_path / "a" / "cut.flac").write_bytes(flac[:len(flac) // 2])
  rows.append("a/cut.flac,a,train")
  (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
  return str(tmp_path / "m.csv"), str(tmp_path / "a" / "cut.flac")


@pytest.mark.parametrize("engine", [
    "keras", pytest.param("estimator", marks=[pytest.mark.slow, pytest.mark.legacy_only])])
@pytest.mark.slow
def test_a_bad_file_found_while_training_ends_in_one_line_naming_it(tmp_path, engine):
  # The file is decoded inside tf.data's tf.numpy_function, so its error
  # reaches the command wrapped in TensorFlow's; the line is read back from it.
  csv, bad = truncated_flac_dataset(tmp_path)
  returncode, stderr = run_command(
      "train", f"--manifest={csv}", f"--cache_dir={tmp_path}/cache", f"--model_dir={tmp_path}/m",
      f"--engine={engine}", "--on_bad_file=fail", "--train_steps=2", "--batch_size=2", "--model_args=width=4")
  assert_one_error_line(returncode, stderr,
                        f"bad audio file {bad!r}: Error : flac decoder lost sync.")


@pytest.mark.slow
def test_a_bad_file_found_while_training_prints_no_traceback_with_tensorflows_warnings_on(
    tmp_path):
  # At TensorFlow's most verbose level its op warnings print the status of
  # every failed call: a Python exception crossing tf.numpy_function put its
  # traceback there, once per call that met the file.
  csv, bad = truncated_flac_dataset(tmp_path)
  proc = subprocess.run(
      [sys.executable, "-m", "audioclf", "train", f"--manifest={csv}",
       f"--cache_dir={tmp_path}/cache", f"--model_dir={tmp_path}/m", "--on_bad_file=fail",
       "--train_steps=2", "--batch_size=2", "--model_args=width=4"],
      cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0"), capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  assert proc.stderr.rstrip("\n").splitlines()[-1] == (
      f"audioclf: error: bad audio file {bad!r}: Error : flac decoder lost sync."), proc.stderr[-3000:]


def test_an_error_carried_out_of_the_graph_is_read_back_whatever_tensorflow_escaped():
  from audioclf.data import graph_errors  # pylint: disable=g-import-not-at-top
  bad = "/d/it's caf\u00e9.flac"

  def fails(_):
    raise decode.BadAudioError(bad, "Error : flac decoder lost sync.")

  ds = tf.data.Dataset.range(4).map(lambda i: graph_errors.numpy_call(fails, [i], tf.float32),
                                    num_parallel_calls=2)
  with pytest.raises(tf.errors.InvalidArgumentError) as info:
    list(ds)
  assert "Traceback" not in info.value.message
  assert cli.user_error(info.value) == f"bad audio file {bad!r}: Error : flac decoder lost sync."


@pytest.mark.slow
def test_a_run_that_ends_before_reading_every_file_says_its_check_is_incomplete(tmp_path):
  from conftest import write_tone_dataset  # pylint: disable=g-import-not-at-top
  # About 25 files to train on: more than one step and the batches read ahead of it.
  data = write_tone_dataset(tmp_path / "data", per_label=12, ext="flac")

  def train(steps, run):
    proc = warm.run(
        [sys.executable, "-m", "audioclf", "train", f"--data_dir={data}", f"--model_dir={run}",
         f"--cache_dir={tmp_path / 'cache'}", f"--train_steps={steps}", "--batch_size=2",
         "--model_args=width=4", "--validation_percent=30", "--testing_percent=0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr

  metrics, stderr = train(1, tmp_path / "short")
  assert metrics["all_train_files_read"] is False
  assert "did not read were not checked" in stderr
  metrics, stderr = train(14, tmp_path / "epoch")  # A whole epoch: every file read.
  assert metrics["all_train_files_read"] is True and "not checked" not in stderr
