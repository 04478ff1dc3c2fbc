"""Processes that use input_fn end: no hang, no abort, the right exit code and a clear error.

Every case runs in its own interpreter under a timeout, as a library user's
script would: peek at a batch and return, raise mid-run, Ctrl-C, a bad file,
a full disk, a read-only cache; cold and warm, WAV and FLAC, train and eval.
"""

import concurrent.futures
import contextlib
import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import audioclf
from audioclf.data import manifest as manifest_lib
from audioclf.data import fill as fill_lib
from conftest import write_tone_dataset
import warm

SCRIPT = textwrap.dedent("""
  import sys, audioclf
  data, cache_dir, mode, scenario = sys.argv[1:5]
  p = audioclf.Params(data_dir=data, cache_dir=cache_dir, batch_size=4, validation_percent=30,
                      testing_percent=0)
  it = iter(audioclf.input_fn(p, mode))
  next(it)
  if scenario == "raise":
    raise RuntimeError("user code failed mid-run")
  if scenario == "interrupt":
    raise KeyboardInterrupt
  if scenario == "read_on":
    for _ in range(60):
      next(it, None)
  print("peeked", flush=True)
""")
TIMEOUT_S = 240


def run_all(cases):
  """Runs (data, cache_dir, mode, scenario) cases, a few at once; returns CompletedProcess each."""
  def one(case):
    cmd = [sys.executable, "-c", SCRIPT, *map(str, case)]
    try:
      return warm.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
      return subprocess.CompletedProcess(cmd, "timeout", e.stdout or "", str(e.stderr or ""))
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    return list(pool.map(one, cases))


def datasets(tmp_path, exts=("wav", "flac")):
  return {ext: write_tone_dataset(tmp_path / ext, per_label=6, seconds=2.0, ext=ext)
          for ext in exts}


def warm_cache(data, cache_dir):
  fill_lib.fill(audioclf.Params(data_dir=data, cache_dir=cache_dir, validation_percent=30,
                             testing_percent=0))
  return cache_dir


def explain(case, out):
  return f"{case}: rc={out.returncode}\n{out.stderr[-2500:]}"


def matrix(tmp_path, scenario, modes=("train", "eval"), states=("cold", "warm"),
           exts=("wav", "flac")):
  """A case per format x cache state x mode. A cold pipeline has Python decoding in flight at
  exit, the cause of every hang seen so far; warm ones run native ops only. FLAC's decode is
  the longest in flight, and the cases that hung were FLAC's: a scenario past the first
  (peek) runs on FLAC alone."""
  cases = []
  for ext, data in datasets(tmp_path, exts).items():
    for state in states:
      for mode in modes:
        cache_dir = str(tmp_path / f"cache-{ext}-{state}-{mode}")
        if state == "warm":
          warm_cache(data, cache_dir)
        cases.append((data, cache_dir, mode, scenario))
  return cases


@pytest.mark.slow
def test_peek_and_exit_ends_with_rc_0_cold_flac_train(tmp_path):
  """The case that hung most often before: a soundfile decode in flight at exit."""
  data = datasets(tmp_path, ("flac",))["flac"]
  cases = [(data, tmp_path / f"cache{i}", "train", "peek") for i in range(2)]
  for case, out in zip(cases, run_all(cases)):
    assert out.returncode == 0 and "peeked" in out.stdout, explain(case, out)


@pytest.mark.slow
@pytest.mark.parametrize("scenario, states, exts", [("peek", ("cold", "warm"), ("wav", "flac")),
                                                    ("read_on", ("cold",), ("flac",))])
def test_scripts_that_stop_reading_end_with_rc_0(tmp_path, scenario, states, exts):
  cases = matrix(tmp_path, scenario, states=states, exts=exts)
  for case, out in zip(cases, run_all(cases)):
    assert out.returncode == 0 and "peeked" in out.stdout, explain(case, out)


@pytest.mark.slow
def test_an_exception_mid_run_ends_with_rc_1_and_its_message(tmp_path):
  cases = matrix(tmp_path, "raise", states=("cold",), exts=("flac",))
  for case, out in zip(cases, run_all(cases)):
    assert out.returncode == 1 and "user code failed mid-run" in out.stderr, explain(case, out)


@pytest.mark.slow
def test_ctrl_c_mid_run_ends_the_process(tmp_path):
  cases = matrix(tmp_path, "interrupt", states=("cold",), exts=("flac",))
  for case, out in zip(cases, run_all(cases)):
    # Python ends an unhandled KeyboardInterrupt as killed by SIGINT (rc -2), never rc 134.
    assert out.returncode in (-2, 130, 1) and "KeyboardInterrupt" in out.stderr, \
        explain(case, out)


def truncate_one_per_split(folder):
  """Cuts the first file of the train and of the validation split to 300 bytes; returns them."""
  manifest = manifest_lib.load(audioclf.Params(data_dir=folder, validation_percent=30,
                                                    testing_percent=0))
  victims = [manifest.split(split)[0].path for split in ("train", "validation")]
  for victim in victims:
    with open(victim, "r+b") as f:
      f.truncate(300)
  return victims


@pytest.mark.slow
def test_a_bad_file_under_fail_ends_with_rc_1_naming_it(tmp_path):
  cases, victims = [], []
  for ext, folder in datasets(tmp_path).items():
    bad = truncate_one_per_split(folder)
    for mode in ("train", "eval"):
      cases.append((folder, tmp_path / f"cache-{ext}-{mode}", mode, "read_on"))
      victims.append(bad)
  for case, bad, out in zip(cases, victims, run_all(cases)):
    assert out.returncode == 1, explain(case, out)
    assert "bad audio file" in out.stderr, explain(case, out)
    assert any(v in out.stderr for v in bad), explain(case, out)


@contextlib.contextmanager
def tmpfs(path, size, *options):
  os.makedirs(path, exist_ok=True)
  mount = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}",) + options),
                          "tmpfs", str(path)], capture_output=True, text=True)
  if mount.returncode != 0:
    pytest.skip(f"cannot mount a tmpfs here to fill a disk: {mount.stderr.strip()}")
  try:
    yield str(path)
  finally:
    subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.slow
def test_a_full_disk_ends_with_rc_1_and_leaves_no_temporary_files(tmp_path):
  data = datasets(tmp_path)
  with tmpfs(tmp_path / "full", "160k") as full:
    cases = [(folder, os.path.join(full, f"{ext}-{mode}"), mode, "read_on")
             for ext, folder in data.items() for mode in ("train", "eval")]
    for case, out in zip(cases, run_all(cases)):
      assert out.returncode == 1, explain(case, out)
      assert "No space left on device" in out.stderr, explain(case, out)
    assert not glob.glob(os.path.join(full, "**", "*.tmp"), recursive=True)


def test_a_read_only_cache_decodes_without_writing_and_warns_once(tmp_path, caplog):
  data = datasets(tmp_path, ("flac",))["flac"]
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "ro"), batch_size=4,
                           validation_percent=30, testing_percent=0)
  want = [y.numpy() for _, y in audioclf.input_fn(params.replace(cache_dir=str(tmp_path / "rw")),
                                                   "train").take(12)]
  with tmpfs(tmp_path / "ro", "1m", "ro"):
    got = [y.numpy() for _, y in audioclf.input_fn(params, "train").take(12)]
    evaluated = sum(int(y.shape[0]) for _, y in audioclf.input_fn(params, "eval"))
    assert os.listdir(params.cache_dir) == []
  np.testing.assert_array_equal(np.concatenate(got), np.concatenate(want))
  assert evaluated == len(manifest_lib.load(params).split("validation"))
  warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
  assert len(warnings) == 1  # Once per process, however many input_fn calls.


# Decodes made slow (a sleep in each soundfile call), so that calls are in
# flight on tf.data's threads whenever the signal lands: the race that hung a
# cold FLAC run at Ctrl-C (or aborted it, "terminate called without an active
# exception") every time rather than one time in three.
SLOW_DECODES = textwrap.dedent("""
  import time
  from audioclf.data import decode
  _decode = decode.decode_file
  def slow_decode(*args, **kwargs):
    time.sleep(0.2)
    return _decode(*args, **kwargs)
  decode.decode_file = slow_decode
""")
INTERRUPTED_SCRIPT = SLOW_DECODES + textwrap.dedent("""
  import os, signal, sys, threading
  import audioclf
  data, cache_dir = sys.argv[1:3]
  p = audioclf.Params(data_dir=data, cache_dir=cache_dir, batch_size=4, validation_percent=30,
                      testing_percent=0)
  it = iter(audioclf.input_fn(p, "train"))
  next(it)
  # Lands while the main thread waits in TensorFlow for the next batch, as Ctrl-C does.
  threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
  for _ in it:
    pass
""")
SIGNAL_TIMEOUT_S = 60


@pytest.mark.slow
def test_ctrl_c_while_flac_files_decode_ends_the_process_at_once(tmp_path):
  # Enough files that the cold epoch is still decoding when the signal lands.
  data = write_tone_dataset(tmp_path / "flac", per_label=16, seconds=1.0, ext="flac")
  cmd = [sys.executable, "-c", INTERRUPTED_SCRIPT, data]

  def one(i):
    try:
      return warm.run(cmd + [str(tmp_path / f"cache{i}")], capture_output=True, text=True,
                      timeout=SIGNAL_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
      return subprocess.CompletedProcess(cmd, "timeout", "", str(e.stderr or ""))
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    outs = list(pool.map(one, range(3)))
  for out in outs:
    # Python ends an unhandled KeyboardInterrupt as killed by SIGINT: never an abort (-6).
    case = "Ctrl-C in a cold FLAC pass"
    assert out.returncode == -2 and "KeyboardInterrupt" in out.stderr, explain(case, out)
    assert "terminate called" not in out.stderr, explain(case, out)
  # Nothing half-written is taken as complete: the split was never finished.
  assert not glob.glob(str(tmp_path / "cache*" / "*" / "splits" / "*.json"))
  assert not glob.glob(str(tmp_path / "cache*" / "**" / "*.tmp"), recursive=True)


@pytest.mark.slow
def test_ctrl_c_in_a_cold_flac_training_run_ends_it_in_one_line_and_the_rerun_resumes(tmp_path):
  data = write_tone_dataset(tmp_path / "flac", per_label=16, seconds=1.0, ext="flac")
  cache_dir = tmp_path / "cache"
  flags = [f"--data_dir={data}", f"--cache_dir={cache_dir}", f"--model_dir={tmp_path / 'run'}",
           "--batch_size=4", "--train_steps=8", "--model_args=width=8", "--validation_percent=30",
           "--testing_percent=0"]
  script = SLOW_DECODES + textwrap.dedent("""
    import sys
    from audioclf.commands import train
    train.run(["train", *sys.argv[1:]])
  """)
  proc = warm.Popen([sys.executable, "-c", script, *flags], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
  try:
    # Ctrl-C once the cold epoch has decoded a few files.
    deadline = time.monotonic() + SIGNAL_TIMEOUT_S
    while (len(glob.glob(str(cache_dir / "*" / "entries" / "*" / "*.f32"))) < 4
           and proc.poll() is None and time.monotonic() < deadline):
      time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=SIGNAL_TIMEOUT_S)
  finally:
    proc.kill()
  assert proc.returncode == 130, stderr[-3000:]
  assert stderr.rstrip().splitlines()[-1].startswith("audioclf: interrupted"), stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  # The rerun finishes the run, and the cache it leaves passes every check.
  rerun = warm.run([sys.executable, "-m", "audioclf", "train", *flags], capture_output=True,
                   text=True, timeout=300)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  check = warm.run([sys.executable, "-m", "audioclf", "cache", f"--cache_dir={cache_dir}",
                    "--verify"], capture_output=True, text=True, timeout=300)
  assert check.returncode == 0 and '"damaged": []' in check.stdout, check.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("size, stage", [("32k", "an entry"), ("1600k", "the split")])
def test_a_full_disk_while_training_ends_in_one_line_naming_the_cache(tmp_path, size, stage):
  from test_cli import assert_one_error_line, run_command  # pylint: disable=g-import-not-at-top
  # About 17 training files of 1 s: 1.1 MB of entries (64 kB each), as much again for their split.
  data = write_tone_dataset(tmp_path / "flac", per_label=8, seconds=1.0, ext="flac")
  train = len(manifest_lib.load(audioclf.Params(data_dir=data, validation_percent=30,
                                                testing_percent=0)).split("train"))
  with tmpfs(tmp_path / "full", size) as full:
    cache_dir = os.path.join(full, "cache")
    returncode, stderr = run_command(
        "train", f"--data_dir={data}", f"--cache_dir={cache_dir}",
        f"--model_dir={tmp_path / 'run'}", "--batch_size=4", "--train_steps=12",
        "--model_args=width=4", "--validation_percent=30", "--testing_percent=0")
    assert_one_error_line(returncode, stderr, f"cannot write the cache in {cache_dir}: No space "
                          "left on device (free space there, or point --cache_dir at another disk)")
    assert not glob.glob(os.path.join(full, "**", "*.tmp"), recursive=True)
    assert not glob.glob(os.path.join(full, "**", "*.json"), recursive=True)
    entries = glob.glob(os.path.join(cache_dir, "*", "entries", "*", "*.f32"))
    # Where the disk filled up: at the first entry, or once the split was being written (the
    # entries alone take 1.1 MB of the 1.6; the last few may still be in flight then, as the
    # pass decodes ahead of the batch that starts the split's writer).
    assert len(entries) == 0 if stage == "an entry" else 0 < len(entries) <= train, stage


@pytest.mark.slow
def test_a_full_disk_while_training_prints_no_traceback_with_tensorflows_warnings_on(tmp_path):
  # At TensorFlow's most verbose level its op warnings print the status of
  # every failed call: a Python exception crossing tf.numpy_function put its
  # traceback there.
  data = write_tone_dataset(tmp_path / "flac", per_label=8, seconds=1.0, ext="flac")
  with tmpfs(tmp_path / "full", "32k") as full:
    cache_dir = os.path.join(full, "cache")
    proc = subprocess.run(
        [sys.executable, "-m", "audioclf", "train", f"--data_dir={data}",
         f"--cache_dir={cache_dir}", f"--model_dir={tmp_path / 'run'}", "--batch_size=4",
         "--train_steps=12", "--model_args=width=4", "--validation_percent=30",
         "--testing_percent=0"],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0"), capture_output=True, text=True,
        timeout=300)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  assert proc.stderr.rstrip("\n").splitlines()[-1].startswith(
      f"audioclf: error: cannot write the cache in {cache_dir}: No space left"), proc.stderr[-3000:]
