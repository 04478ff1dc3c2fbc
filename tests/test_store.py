"""The cache checks itself: a damaged split is reported and refilled, never served; content decides keys."""

import glob
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
import soundfile as sf

import audioclf
from audioclf.data import manifest as manifest_lib
from audioclf.data import fill as fill_lib
from audioclf.data import pipeline
from audioclf.data import store as store_lib
from audioclf.data import cache_format, cache_maintenance, keys
from conftest import tone, write_tone_dataset
import warm


def params_for(tmp_path, ext="wav", **kw):
  data = str(tmp_path / "data")
  if not os.path.isdir(data):
    write_tone_dataset(data, per_label=8, ext=ext)
  kw.setdefault("batch_size", 4)
  return audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), validation_percent=99.9,
                         testing_percent=0, **kw)


def eval_waveforms(params):
  return np.concatenate([f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "eval")])


def the_split(params):
  [marker] = glob.glob(os.path.join(store_lib.Store.for_params(params).splits_dir, "*.json"))
  return marker[:-len(".json")]


def flip_bytes(path, count, seed=0):
  data = bytearray(open(path, "rb").read())
  rng = np.random.default_rng(seed)
  for i in rng.choice(len(data), count, replace=False):
    data[i] ^= 0xFF
  with open(path, "r+b") as f:
    f.write(data)


def write_marker(base, marker):
  with open(base + ".json", "w") as f:
    json.dump(marker, f)


DAMAGE = {
    "flipped bytes": lambda base: flip_bytes(base + ".data", 2000),
    "another dtype": lambda base: write_marker(base, {
        **json.load(open(base + ".json")),
        "dtype": {"<i2": "<f4", "<f4": "<i2"}[json.load(open(base + ".json"))["dtype"]]}),
    "an older format": lambda base: write_marker(
        base, {**json.load(open(base + ".json")), "format": 3}),
    "a marker of []": lambda base: write_marker(base, []),
    "a marker that is not JSON": lambda base: open(base + ".json", "w").write("{"),
    "truncated data": lambda base: os.truncate(base + ".data", os.path.getsize(base + ".data") // 2),
    "truncated index": lambda base: os.truncate(base + ".idx.npy", 100),
    "a deleted index": lambda base: os.remove(base + ".idx.npy"),
    "a shuffled index": lambda base: np.save(base + ".idx.npy", np.load(base + ".idx.npy")[::-1]),
    "two keys swapped": lambda base: swap_keys(base),
}


def swap_keys(base, rows=(0, 1)):
  """Swaps two rows of a split's keys, as written: a file that names every clip but two right."""
  k = np.load(base + ".keys.npy")
  k[list(rows)] = k[list(rows[::-1])]
  with open(base + ".keys.npy", "wb") as f:
    np.save(f, k)


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("ext", ["wav", "flac"])
def test_a_damaged_split_is_reported_and_refilled_never_served(tmp_path, caplog, damage, ext):
  params = params_for(tmp_path, ext)
  clean = eval_waveforms(params)
  base = the_split(params)
  DAMAGE[damage](base)
  before = pipeline.PROCESS.decodes.count
  got = eval_waveforms(params)  # Neither wrong clips nor a traceback: the clean clips again.
  np.testing.assert_array_equal(got, clean)
  assert pipeline.PROCESS.decodes.count - before == len(clean)  # Refilled from the source files.
  assert any("is damaged" in r.getMessage() for r in caplog.records)
  cache_format.check_files(base, open(cache_format.marker_path(base), "rb").read(), len(clean))
  np.testing.assert_array_equal(eval_waveforms(params), clean)


def test_opening_checks_each_clip_unless_this_host_checked_these_bytes(tmp_path):
  params = params_for(tmp_path, "flac")
  eval_waveforms(params)
  base = the_split(params)
  fps = keys.Fingerprints()
  assert fps.checked(base + ".data")  # The fill wrote it: no need to read it back.
  s = store_lib.Store.for_params(params)
  os.utime(base + ".data")  # Any write through the file system moves ctime: checked again.
  assert not fps.checked(base + ".data")
  assert s.open(base, 24) is not None and fps.checked(base + ".data")


@pytest.mark.slow
def test_verify_checks_every_byte_and_unmarks_a_damaged_split(tmp_path):
  params = params_for(tmp_path, "flac")
  eval_waveforms(params)
  cmd = [sys.executable, "-m", "audioclf", "cache", f"--cache_dir={params.cache_dir}", "--verify"]
  out = warm.run(cmd, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  report = json.loads(out.stdout.strip().splitlines()[-1])
  assert report["splits"] == 1 and report["damaged"] == [] and report["bytes"] > 0
  base = the_split(params)
  data = bytearray(open(base + ".data", "rb").read())
  data[len(data) // 2] ^= 1  # One bit; and the stat put back, so only the bytes tell.
  st = os.stat(base + ".data")
  with open(base + ".data", "r+b") as f:
    f.write(data)
  os.utime(base + ".data", ns=(st.st_atime_ns, st.st_mtime_ns))
  out = warm.run(cmd, capture_output=True, text=True, timeout=120)
  assert out.returncode == 1 and "1 damaged splits" in out.stderr, out.stderr[-2000:]
  assert not os.path.exists(base + ".json")


def killed_fill(params):
  """Entries of every validation file, and no split: what a fill killed before its end leaves."""
  s = store_lib.Store.for_params(params)
  examples = manifest_lib.load(params).split("validation")
  job = fill_lib.Fill(s, examples, s.fingerprints.of(examples), params)
  for row in range(len(examples)):
    job.decode(row)
  return glob.glob(os.path.join(s.entries_dir, "*", "*.f32"))


def test_damaged_entries_of_a_killed_fill_are_decoded_again_never_served(tmp_path, caplog):
  params = params_for(tmp_path, "flac")
  clean = eval_waveforms(params.replace(cache_dir=str(tmp_path / "clean")))
  entries = killed_fill(params)
  assert len(entries) == len(clean)
  for path in entries:
    flip_bytes(path, 64)
  before = pipeline.PROCESS.decodes.count
  np.testing.assert_array_equal(eval_waveforms(params), clean)
  assert pipeline.PROCESS.decodes.count - before == len(clean)
  assert sum("fails its checksum" in r.getMessage() for r in caplog.records) == len(clean)
  # And the split written from them holds the clean clips, under checksums that pass.
  assert cache_maintenance.verify(params.cache_dir)["damaged"] == []
  np.testing.assert_array_equal(eval_waveforms(params), clean)


def test_an_entry_under_another_files_name_fails_its_checksum(tmp_path):
  params = params_for(tmp_path, "flac")
  first, second = sorted(killed_fill(params))[:2]
  os.replace(first, second)  # Whole, valid samples, of another file.
  s = store_lib.Store.for_params(params)
  assert s.read_entry(os.path.basename(second)[:-len(".f32")]) is None
  assert not os.path.exists(second)  # Removed: its file is decoded again.


def test_verify_checks_every_entry_and_the_keys_of_every_split(tmp_path):
  params = params_for(tmp_path, "flac")
  eval_waveforms(params)  # One complete split.
  base = the_split(params)
  swap_keys(base)
  other = params.replace(validation_percent=50)  # Another split's files: entries, no split.
  entries = killed_fill(other)
  flip_bytes(entries[0], 64)
  report = cache_maintenance.verify(params.cache_dir)
  assert report["damaged"] == [base] and not os.path.exists(base + ".json")
  assert report["entries"] == len(entries) and report["damaged_entries"] == [entries[0]]
  assert not os.path.exists(entries[0])
  assert cache_maintenance.verify(params.cache_dir)["damaged_entries"] == []


def test_verify_leaves_the_folders_of_another_format_version_alone(tmp_path):
  params = params_for(tmp_path, "flac")
  eval_waveforms(params)
  old = os.path.join(params.cache_dir, "an-older-decode-key")
  shutil.copytree(store_lib.Store.for_params(params).root, old)
  for marker in glob.glob(os.path.join(old, "splits", "*.json")):
    write_marker(marker[:-len(".json")], {**json.load(open(marker)), "format": 4})
  os.makedirs(os.path.join(old, "entries", "ab"))
  np.zeros(100, "<f4").tofile(os.path.join(old, "entries", "ab", "ab" * 16 + ".f32"))  # No CRC.
  before = sorted(glob.glob(os.path.join(old, "**", "*"), recursive=True))
  report = cache_maintenance.verify(params.cache_dir)
  assert report["other_formats"] == [old] and report["damaged"] == []
  assert report["damaged_entries"] == [] and report["entries"] == 0
  assert sorted(glob.glob(os.path.join(old, "**", "*"), recursive=True)) == before


def test_a_split_with_swapped_keys_lends_no_clips_to_a_later_split(tmp_path):
  # A later split of the same files (an edited dataset) takes its clips from
  # complete splits by key: swapped keys would give two files each other's clips.
  params = params_for(tmp_path, "flac")
  eval_waveforms(params)
  swap_keys(the_split(params), rows=(0, 5))
  os.remove(sorted(glob.glob(os.path.join(params.data_dir, "high", "*.flac")))[-1])
  np.testing.assert_array_equal(
      eval_waveforms(params), eval_waveforms(params.replace(cache_dir=str(tmp_path / "fresh"))))


def test_an_edit_that_puts_the_mtime_back_is_caught(tmp_path):
  params = params_for(tmp_path, "flac")
  cold = eval_waveforms(params)
  victim = sorted(glob.glob(os.path.join(params.data_dir, "mid", "*.flac")))[0]
  st = os.stat(victim)
  sf.write(victim, tone(3000.0, 0.5, 16000, seed=99), 16000, subtype="PCM_16")
  os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
  before = pipeline.PROCESS.decodes.count
  warm = eval_waveforms(params)
  assert pipeline.PROCESS.decodes.count - before == 1
  assert sum(not np.array_equal(a, b) for a, b in zip(cold, warm)) == 1


def test_an_untouched_file_is_never_read_again_to_fingerprint_it(tmp_path):
  params = params_for(tmp_path)
  examples = manifest_lib.load(params).split("validation")
  first, second = keys.Fingerprints(), keys.Fingerprints()
  a = first.of(examples)
  b = second.of(examples)
  assert a == b and first.hashed == len(examples) and second.hashed == 0
  third = keys.Fingerprints()
  third.of(examples[1:])  # Another list of the same files: per-file memo, still no read.
  assert third.hashed == 0


def test_a_dataset_copied_elsewhere_matches_its_cache(tmp_path):
  params = params_for(tmp_path, "flac")
  cold = eval_waveforms(params)
  copy = str(tmp_path / "elsewhere" / "data")
  shutil.copytree(params.data_dir, copy, copy_function=shutil.copyfile)  # Plain cp: new mtimes.
  before = pipeline.PROCESS.decodes.count
  np.testing.assert_array_equal(eval_waveforms(params.replace(data_dir=copy)), cold)
  assert pipeline.PROCESS.decodes.count == before


def test_a_reader_while_a_writer_is_still_filling_decodes_or_waits_never_reads_half(tmp_path):
  params = params_for(tmp_path, "flac")
  want = eval_waveforms(params.replace(cache_dir=str(tmp_path / "reference")))
  s = store_lib.Store.for_params(params)
  examples = manifest_lib.load(params).split("validation")
  fingerprints = s.fingerprints.of(examples)
  from audioclf.data.fill import Fill
  writer = Fill(s, examples, fingerprints, params)
  original = writer._source  # pylint: disable=protected-access
  halfway, go_on = threading.Event(), threading.Event()

  def slow_source(row, dtype):
    if row == len(examples) // 2:
      halfway.set()
      go_on.wait(60)
    return original(row, dtype)

  writer._source = slow_source  # pylint: disable=protected-access
  thread = threading.Thread(target=writer.fill_now)
  thread.start()
  try:
    assert halfway.wait(60)  # Half the split's data is written; no marker yet.
    assert glob.glob(os.path.join(s.splits_dir, "*.tmp")) and not glob.glob(
        os.path.join(s.splits_dir, "*.json"))
    np.testing.assert_array_equal(eval_waveforms(params), want)  # Decodes (entries), not half.
  finally:
    go_on.set()
    thread.join(60)
  np.testing.assert_array_equal(eval_waveforms(params), want)
  assert len(glob.glob(os.path.join(s.splits_dir, "*.json"))) == 1
