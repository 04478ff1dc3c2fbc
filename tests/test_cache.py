"""The persistent clip cache: reuse across calls and processes, invalidation, kill and race safety."""

import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import soundfile as sf

import audioclf
from audioclf.data import pipeline
from audioclf.data import cache_maintenance
from audioclf.data import store as store_lib
from conftest import tone, write_tone_dataset
from test_decode import bad_dataset
from test_pipeline import assert_same_batches, batches_of
import warm


def params_for(tmp_path, ext="wav", **kw):
  """Canonical WAVs are read natively and need no entries; FLACs are decoded into entries."""
  data = str(tmp_path / "data")
  if not os.path.isdir(data):
    write_tone_dataset(data, per_label=12, ext=ext)
  kw.setdefault("batch_size", 4)
  return audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), **kw)


def markers(params):
  return glob.glob(os.path.join(store_lib.Store.for_params(params).splits_dir, "*.json"))


def eval_waveforms(params, split=None):
  ds = audioclf.input_fn(params, "eval", split=split)
  return np.concatenate([f["waveform"].numpy() for f, _ in ds])


def run_python(code, *args, wait=True):
  """Runs `code` in a fresh interpreter (a new process shares no Python state)."""
  cmd = [sys.executable, "-c", textwrap.dedent(code), *map(str, args)]
  env = dict(os.environ, PYTHONPATH=os.path.dirname(__file__) + os.pathsep +
             os.environ.get("PYTHONPATH", ""))
  if not wait:
    return warm.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  out = warm.run(cmd, env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout


FILL = """
import sys, audioclf
from audioclf.data import pipeline
p = audioclf.Params(data_dir=sys.argv[1], cache_dir=sys.argv[2], batch_size=4,
                    validation_percent=float(sys.argv[3]), testing_percent=0)
n = sum(int(y.shape[0]) for _, y in audioclf.input_fn(p, "eval"))
print(n, pipeline.PROCESS.decodes.count)
"""


@pytest.mark.slow
def test_second_call_and_second_process_decode_nothing(tmp_path):
  params = params_for(tmp_path)
  cold = eval_waveforms(params)
  assert pipeline.PROCESS.decodes.count >= len(cold) and len(markers(params)) == 1
  before = pipeline.PROCESS.decodes.count
  np.testing.assert_array_equal(eval_waveforms(params), cold)
  assert pipeline.PROCESS.decodes.count == before
  params = params.replace(testing_percent=0)
  cold = eval_waveforms(params)
  n, decoded = run_python(FILL, params.data_dir, params.cache_dir, 10).split()
  assert (int(n), int(decoded)) == (len(cold), 0)


def test_every_split_is_cached(tmp_path):
  params = params_for(tmp_path, validation_percent=30, testing_percent=30)
  eval_waveforms(params)
  eval_waveforms(params, split="test")
  # An evaluation pass writes its split before its last batch is delivered.
  assert len(markers(params)) == 2
  # Train is marked once its first epoch is stored. (Not checked after one
  # batch: the prefetch may already have run through the 14-file epoch.)
  for _ in audioclf.input_fn(params, "train").take(20):
    pass
  store_lib.Store.for_params(params).wait_for_writers()  # Training writes the split in the background.
  assert len(markers(params)) == 3


@pytest.mark.slow
def test_prefill_command_fills_every_split_and_counts_its_decodes(tmp_path):
  params = params_for(tmp_path, validation_percent=30, testing_percent=30)
  cmd = [sys.executable, "-m", "audioclf", "cache", f"--data_dir={params.data_dir}",
         f"--cache_dir={params.cache_dir}", "--validation_percent=30", "--testing_percent=30"]
  reports = []
  for _ in range(2):
    out = warm.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    reports.append(json.loads(out.stdout.strip().splitlines()[-1]))
  first, second = reports
  assert first["complete_splits"] == 3
  for split in ("train", "validation", "test"):
    assert first[split]["decoded"] == first[split]["files"] > 0
    assert not first[split]["was_cached"]
    assert second[split]["decoded"] == 0 and second[split]["was_cached"]


@pytest.mark.parametrize("ext", ["wav", "flac"])
def test_a_changed_file_gets_a_new_entry_not_a_stale_one(tmp_path, ext):
  params = params_for(tmp_path, ext, validation_percent=99.9, testing_percent=0)
  cold = eval_waveforms(params)
  victim = sorted(glob.glob(os.path.join(params.data_dir, "mid", "*." + ext)))[0]
  sf.write(victim, tone(3000.0, 0.5, 16000, seed=99), 16000, subtype="PCM_16")
  before = pipeline.PROCESS.decodes.count
  warm = eval_waveforms(params)
  # FLAC: the changed file only, the other entries are reused. WAV: the split
  # is read again from source, which costs what reading entries would.
  assert pipeline.PROCESS.decodes.count - before == (1 if ext == "flac" else 36)
  changed = [i for i in range(len(cold)) if not np.array_equal(cold[i], warm[i])]
  assert len(changed) == 1
  want = sf.read(victim, dtype="float32")[0]
  np.testing.assert_array_equal(warm[changed[0]][:len(want)], want)
  assert len(markers(params)) == 2


def test_a_written_split_keeps_no_entries_and_lends_its_clips_to_later_splits(tmp_path):
  params = params_for(tmp_path, "flac", validation_percent=99.9, testing_percent=0)
  entries = os.path.join(store_lib.Store.for_params(params).entries_dir, "*", "*.f32")
  before = pipeline.PROCESS.decodes.count
  validation = eval_waveforms(params)
  assert pipeline.PROCESS.decodes.count - before == 36
  assert not glob.glob(entries)  # The split holds the clips once; no second copy.
  # A new split of some of the same files (another split percentage) decodes nothing.
  half = params.replace(validation_percent=50)
  before = pipeline.PROCESS.decodes.count
  got = eval_waveforms(half)
  assert pipeline.PROCESS.decodes.count == before
  assert len(markers(params)) == 2
  want = eval_waveforms(half.replace(cache_dir=str(tmp_path / "fresh")))
  assert 0 < len(want) < len(validation)
  np.testing.assert_array_equal(got, want)


def test_a_new_decode_parameter_gets_a_new_cache(tmp_path):
  params = params_for(tmp_path)
  eval_waveforms(params)
  before = pipeline.PROCESS.decodes.count
  resampled = eval_waveforms(params.replace(sample_rate=8000, fmax=3800.0))
  assert resampled.shape[1] == 8000
  assert pipeline.PROCESS.decodes.count - before == len(resampled)
  assert len(os.listdir(params.cache_dir)) == 2


KILLED = """
import os, signal, sys, audioclf
p = audioclf.Params(data_dir=sys.argv[1], cache_dir=sys.argv[2], batch_size=2,
                    validation_percent=99.9, testing_percent=0)
for i, _ in enumerate(audioclf.input_fn(p, "eval")):
  if i == 3:
    os.kill(os.getpid(), signal.SIGKILL)  # No cleanup, no atexit: as a crash or OOM kill.
"""


@pytest.mark.slow
def test_a_killed_fill_is_never_taken_as_complete(tmp_path):
  params = params_for(tmp_path, "flac", validation_percent=99.9, testing_percent=0)
  proc = run_python(KILLED, params.data_dir, params.cache_dir, wait=False)
  proc.wait(timeout=120)
  assert proc.returncode == -signal.SIGKILL
  written = glob.glob(os.path.join(store_lib.Store.for_params(params).entries_dir, "*", "*.f32"))
  assert 0 < len(written) < 36 and not markers(params)
  before = pipeline.PROCESS.decodes.count
  got = eval_waveforms(params)
  assert pipeline.PROCESS.decodes.count - before == 36 - len(written)  # It picks up where the kill left off.
  ref = eval_waveforms(params.replace(cache_dir=str(tmp_path / "fresh")))
  np.testing.assert_array_equal(got, ref)
  assert len(markers(params)) == 1
  assert not glob.glob(os.path.join(params.cache_dir, "**", "*.tmp"), recursive=True)


@pytest.mark.slow
def test_two_processes_filling_one_cache_both_succeed(tmp_path):
  params = params_for(tmp_path, validation_percent=99.9, testing_percent=0)
  procs = [run_python(FILL, params.data_dir, params.cache_dir, 99.9, wait=False) for _ in range(2)]
  outs = [p.communicate(timeout=120) for p in procs]
  assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
  assert all(out.split()[0] == "36" for out, _ in outs)
  assert len(markers(params)) == 1
  ref = eval_waveforms(params.replace(cache_dir=str(tmp_path / "fresh")))
  np.testing.assert_array_equal(eval_waveforms(params), ref)


ONE_EPOCH = """
import sys, time, audioclf
from audioclf.data import manifest as manifest_lib, store as store_lib
# The split's writer, slow: the script ends long before it does, and the process waits for it.
write_split = store_lib.Store.write_split
store_lib.Store.write_split = lambda *a: (time.sleep(1.5), write_split(*a))[1]
p = audioclf.Params(data_dir=sys.argv[1], cache_dir=sys.argv[2], batch_size=int(sys.argv[3]),
                    validation_percent=0, testing_percent=0)
n = len(manifest_lib.load(p).split("train"))
for _ in audioclf.input_fn(p, "train").take(n // p.batch_size):  # One epoch of steps.
  pass
print(n)
"""


@pytest.mark.slow
def test_a_run_of_exactly_one_epoch_leaves_a_complete_cache(tmp_path):
  params = params_for(tmp_path, validation_percent=0, testing_percent=0)
  assert int(run_python(ONE_EPOCH, params.data_dir, params.cache_dir, 5)) % 5 != 0
  assert len(markers(params)) == 1  # 36 files, 7 batches of 5: the dropped tail was stored too.
  before = pipeline.PROCESS.decodes.count
  for _ in audioclf.input_fn(params.replace(batch_size=5), "train").take(10):
    pass
  assert pipeline.PROCESS.decodes.count == before


def test_a_warm_train_split_starts_without_decoding_again(tmp_path):
  params = params_for(tmp_path)
  for _ in audioclf.input_fn(params, "train").take(12):
    pass
  store_lib.Store.for_params(params).wait_for_writers()  # Training writes the split in the background.
  before = pipeline.PROCESS.decodes.count
  next(iter(audioclf.input_fn(params, "train")))
  assert pipeline.PROCESS.decodes.count == before  # The split is read as written: no file decoded again.


def held_split_writer(monkeypatch) -> tuple[threading.Event, threading.Event, threading.Event]:
  """Holds every split write until `release` is set: (started, release, written)."""
  started, release, written = threading.Event(), threading.Event(), threading.Event()
  write_split = store_lib.Store.write_split

  def held_write_split(self, *args):
    started.set()
    release.wait(30)  # Bounded: a pipeline that waits for the writer fails its test, late.
    try:
      return write_split(self, *args)
    finally:
      written.set()

  monkeypatch.setattr(store_lib.Store, "write_split", held_write_split)
  return started, release, written


def assert_cold_batches_before_the_split_are_warm_ones(params, monkeypatch, steps: int) -> None:
  """`steps` cold batches, all drawn while the split writer is held, are a warm run's bits."""
  started, release, written = held_split_writer(monkeypatch)
  cold = batches_of(audioclf.input_fn(params, "train"), steps)
  assert started.is_set() and not written.is_set()  # All of them while the writer was held.
  release.set()
  assert written.wait(30) and len(markers(params)) == 1
  assert_same_batches(cold, batches_of(audioclf.input_fn(params, "train"), steps))


@pytest.mark.parametrize("ext", ["wav", "flac"])
def test_the_first_epochs_end_does_not_wait_for_the_split_to_be_written(tmp_path, monkeypatch, ext):
  """Past the cold pass, batches read the files' sources while the writer works: a warm run's bits."""
  params = params_for(tmp_path, ext, validation_percent=0, testing_percent=0)
  # Into the third epoch: 36 files, batches of 4.
  assert_cold_batches_before_the_split_are_warm_ones(params, monkeypatch, 2 * 36 // 4 + 3)


@pytest.mark.parametrize("bad_name", ["text.wav", "truncated.flac"])
def test_before_the_split_is_written_a_skipped_file_stays_skipped(tmp_path, monkeypatch, bad_name):
  """on_bad_file=skip: the batches read from sources leave the bad file out, as the split does."""
  data, _ = bad_dataset(tmp_path, bad_name)
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "c"), validation_percent=0,
                           testing_percent=0, on_bad_file="skip", batch_size=4,
                           time_shift_seconds=0.0, clip_seconds=0.5)
  # Four epochs of the six good files.
  assert_cold_batches_before_the_split_are_warm_ones(params, monkeypatch, 6)


@pytest.mark.parametrize("dtype", ["<i2", "<f4"])
def test_native_and_numpy_cuts_match_a_sample_by_sample_cut(tmp_path, dtype):
  """Windows shifted off either end of their clip, wholly outside it, over empty clips."""
  import tensorflow as tf
  from audioclf.data import cache_format, window
  rng = np.random.default_rng(0)
  lengths = np.array([0, 1, 5, 10, 13, 30])
  index = np.stack([np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths,
                    np.zeros_like(lengths)], 1)
  blob = rng.integers(-30000, 30000, lengths.sum()).astype(dtype)
  base = str(tmp_path / "split")
  blob.tofile(base + ".data")
  split = cache_format.Split(base, {"dtype": dtype, "samples": int(lengths.sum())}, index,
                      os.stat(base + ".data"))
  mapped = tf.raw_ops.ImmutableConst(dtype=tf.int16 if dtype == "<i2" else tf.float32,
                                     shape=[lengths.sum()], memory_region_name=base + ".data")
  scale = np.float32(1 / 32768) if dtype == "<i2" else np.float32(1)
  for n in (1, 7, 20):
    rows, starts = rng.integers(0, len(lengths), 300), rng.integers(-40, 45, 300)
    want = np.zeros((len(rows), n), np.float32)
    for j, (row, start) in enumerate(zip(rows, starts)):
      for k in range(n):
        if 0 <= start + k < lengths[row]:
          want[j, k] = blob[index[row, 0] + start + k] * scale
    np.testing.assert_array_equal(split.windows(rows, starts, n), want)
    native = np.stack([window.cut(mapped, index[r, 0], index[r, 1], s, n).numpy()
                       for r, s in zip(rows, starts)]).astype(np.float32) * scale
    np.testing.assert_array_equal(native, want)
    batch = window.cut(mapped, index[rows, 0], index[rows, 1], starts, n).numpy()
    np.testing.assert_array_equal(batch.astype(np.float32) * scale, want)


def test_prune_deletes_what_went_unused_and_keeps_what_a_run_just_read(tmp_path):
  params = params_for(tmp_path, ext="flac", validation_percent=30, testing_percent=30)
  eval_waveforms(params)
  eval_waveforms(params, split="test")
  week_ago = time.time() - 7 * 86400
  for path in glob.glob(os.path.join(params.cache_dir, "**", "*"), recursive=True):
    os.utime(path, (week_ago, week_ago))
  validation = eval_waveforms(params)  # Warm: marks the validation split as used now.
  report = cache_maintenance.prune(params.cache_dir, days=3)
  assert report["kept_splits"] == 1
  assert report["removed_files"] == 4  # The test split's marker, data, index and keys.
  assert len(markers(params)) == 1
  decoded = pipeline.PROCESS.decodes.count
  np.testing.assert_array_equal(eval_waveforms(params), validation)  # Still warm.
  assert pipeline.PROCESS.decodes.count == decoded
  eval_waveforms(params, split="test")  # Refilled from the source files.
  assert pipeline.PROCESS.decodes.count > decoded
  assert cache_maintenance.prune(params.cache_dir, days=3) == {
      "removed_files": 0, "freed_bytes": 0, "kept_splits": 2}
