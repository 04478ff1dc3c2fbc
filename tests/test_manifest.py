"""Manifests: folder scans, CSV files, Speech Commands splits, and clear errors for bad sources."""

import os

import pytest

from audioclf import manifest
from audioclf.params import Params
from conftest import write_tone_dataset


def test_folders_give_sorted_labels_and_skip_non_label_folders(tone_data):
  os.makedirs(os.path.join(tone_data, "_background_noise_"))
  open(os.path.join(tone_data, "_background_noise_", "noise.wav"), "wb").close()
  open(os.path.join(tone_data, "low", "README.txt"), "w").write("not audio, not listed")
  m = manifest.load(Params(data_dir=tone_data))
  assert m.labels == ("high", "low", "mid")
  assert len(m.examples) == 36
  assert all(os.path.isabs(e.path) and e.path.endswith(".wav") for e in m.examples)
  assert sum(m.counts().values()) == 36


def test_hash_split_is_stable_and_keeps_a_speaker_in_one_split():
  a = manifest.which_split("/x/yes/0a2b400e_nohash_0.wav", 10, 10)
  assert all(manifest.which_split(f"/y/{w}/0a2b400e_nohash_{n}.wav", 10, 10) == a
             for w in ("no", "up", "down") for n in range(5))
  splits = [manifest.which_split(f"/x/a/{i:08x}_nohash_0.wav", 10, 10) for i in range(2000)]
  share = {s: splits.count(s) / len(splits) for s in ("train", "validation", "test")}
  assert 0.75 < share["train"] < 0.85 and 0.07 < share["validation"] < 0.13


def test_speech_commands_lists_decide_the_split(tone_data):
  with open(os.path.join(tone_data, "validation_list.txt"), "w") as f:
    f.write("low/spk000low_nohash_0.wav\nmid/spk001mid_nohash_0.wav\n")
  with open(os.path.join(tone_data, "testing_list.txt"), "w") as f:
    f.write("high/spk002high_nohash_0.wav\n")
  m = manifest.load(Params(data_dir=tone_data))
  assert sorted(os.path.basename(e.path) for e in m.split("validation")) == [
      "spk000low_nohash_0.wav", "spk001mid_nohash_0.wav"]
  assert [os.path.basename(e.path) for e in m.split("test")] == ["spk002high_nohash_0.wav"]
  assert len(m.split("train")) == 33


def test_csv_manifest_with_and_without_split_column(tmp_path, tone_data):
  rel = os.path.relpath(tone_data, tmp_path)
  csv = tmp_path / "m.csv"
  csv.write_text("path,label,split\n"
                 f"{rel}/low/spk000low_nohash_0.wav,low,train\n"
                 f"{rel}/low/spk001low_nohash_0.wav,low,test\n"
                 f"{rel}/high/spk000high_nohash_0.wav,high\n"
                 f"{rel}/mid/spk000mid_nohash_0.wav,mid,validation\n")
  m = manifest.load(Params(manifest=str(csv)))
  assert m.labels == ("high", "low", "mid")
  by_name = {os.path.basename(e.path): e.split for e in m.examples}
  assert by_name["spk000low_nohash_0.wav"] == "train"
  assert by_name["spk001low_nohash_0.wav"] == "test"
  assert by_name["spk000mid_nohash_0.wav"] == "validation"
  assert by_name["spk000high_nohash_0.wav"] == manifest.which_split("spk000high_nohash_0.wav", 10, 10)


@pytest.mark.parametrize("row, match", [
    ("a.wav,low,holdout", r"m\.csv:2: split must be one of"),
    ("a.wav", r"m\.csv:2: expected 'path,label\[,split\]'"),
])
def test_csv_malformed_rows_name_the_line(tmp_path, row, match):
  (tmp_path / "m.csv").write_text(f"path,label\n{row}\n")
  with pytest.raises(manifest.DataError, match=match):
    manifest.load(Params(manifest=str(tmp_path / "m.csv")))


def test_missing_listed_file_fails_or_is_skipped(tmp_path, tone_data):
  rel = os.path.relpath(tone_data, tmp_path)
  csv = tmp_path / "m.csv"
  csv.write_text(f"{rel}/low/spk000low_nohash_0.wav,low\n{rel}/mid/spk000mid_nohash_0.wav,mid\n"
                 "gone/missing.wav,high\n")
  with pytest.raises(manifest.DataError, match=r"missing\.wav"):
    manifest.load(Params(manifest=str(csv)))
  m = manifest.load(Params(manifest=str(csv), on_bad_file="skip"))
  assert len(m.examples) == 2 and m.labels == ("low", "mid")


@pytest.mark.parametrize("make, match", [
    (lambda root: None, "does not exist"),
    (lambda root: os.makedirs(root), "no label folders"),
    (lambda root: write_tone_dataset(root, labels=("only",), per_label=2), "single class"),
])
def test_unusable_sources_are_clear_errors(tmp_path, make, match):
  root = str(tmp_path / "data")
  make(root)
  with pytest.raises(manifest.DataError, match=match):
    manifest.load(Params(data_dir=root))


def test_exactly_one_source():
  with pytest.raises(manifest.DataError, match="exactly one"):
    manifest.load(Params())
  with pytest.raises(manifest.DataError, match="exactly one"):
    manifest.load(Params(data_dir="a", manifest="b"))
