"""Manifests: folder scans, CSV files, Speech Commands splits, and clear errors for bad sources."""

import os

import pytest

from audioclf.data import manifest
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


@pytest.mark.parametrize("content, match", [
    (b"path,label\nlow/a.wav,low\nhigh/caf\xe9.wav,high\n", r"m\.csv:3: not UTF-8 text \(byte 0xe9\)"),
    (b"\xff\xfep\x00a\x00t\x00h\x00\n\x00", r"m\.csv:1: not UTF-8 text \(byte 0xff\)"),  # UTF-16.
    (b"path,label\na.wav,low\nb.wav,high,train,extra\n", r"m\.csv:3: expected 'path,label\[,split\]'"),
    (b"path,label\na.wav,,train\n", r"m\.csv:2: expected 'path,label\[,split\]'"),
    (b"path,label\na.wav,low,Train\n", r"m\.csv:2: split must be one of .*got 'Train'"),
    (b"path,label\n" + b"a" * 200_000 + b",low\n", r"m\.csv:2: not a CSV row: field larger"),
    (b"path,label\nb\x00.wav,high\n", r"m\.csv:2: cannot read audio file .*embedded null"),
    (b"path,label\nb.wav,high\n\"c.wav,low\n", r"m\.csv:3: expected .*got \['c\.wav,low'\]"),
    (b"path,label\n", r"no audio files found in .*m\.csv"),
])
def test_csv_problems_name_the_file_and_line(tmp_path, content, match):
  (tmp_path / "m.csv").write_bytes(content)
  with pytest.raises(manifest.DataError, match=match):
    manifest.load(Params(manifest=str(tmp_path / "m.csv")))


def test_csv_missing_or_folder_paths_name_the_csv_line(tmp_path, tone_data):
  rel = os.path.relpath(tone_data, tmp_path)
  csv = tmp_path / "m.csv"
  csv.write_text(f"path,label\n{rel}/low/spk000low_nohash_0.wav,low\n{rel}/mid,mid\n")
  with pytest.raises(manifest.DataError, match=r"m\.csv:3: cannot read audio file .*mid': not a file"):
    manifest.load(Params(manifest=str(csv)))
  csv.write_text(f"path,label\n{rel}/low/spk000low_nohash_0.wav,low\n\n# gone:\ngone.wav,mid\n")
  with pytest.raises(manifest.DataError,
                    match=r"m\.csv:5: cannot read audio file .*gone\.wav': No such file"):
    manifest.load(Params(manifest=str(csv)))


def test_a_utf8_csv_with_a_byte_order_mark_and_non_ascii_names_loads(tmp_path, tone_data):
  for label in ("bas", "haut"):  # Names with accents, as a spreadsheet saves them (BOM first).
    os.makedirs(tmp_path / f"é{label}")
    os.rename(os.path.join(tone_data, "low" if label == "bas" else "high", "spk000" +
                           ("low" if label == "bas" else "high") + "_nohash_0.wav"),
              tmp_path / f"é{label}" / "à.wav")
  (tmp_path / "m.csv").write_text("path,label\nébas/à.wav,bas\néhaut/à.wav,haut\n",
                                  encoding="utf-8-sig")
  m = manifest.load(Params(manifest=str(tmp_path / "m.csv")))
  assert m.labels == ("bas", "haut")
  assert all(e.path.endswith("à.wav") for e in m.examples)


def test_a_split_list_that_is_not_utf8_names_its_line(tone_data):
  with open(os.path.join(tone_data, "validation_list.txt"), "wb") as f:
    f.write(b"low/spk000low_nohash_0.wav\nmid/\xe9.wav\n")
  with pytest.raises(manifest.DataError, match=r"validation_list\.txt:2: not UTF-8 text"):
    manifest.load(Params(data_dir=tone_data))


def test_a_manifest_that_is_a_folder_is_refused(tmp_path):
  with pytest.raises(manifest.DataError, match="does not exist or is not a file"):
    manifest.load(Params(manifest=str(tmp_path)))


# --- The 12-class task's classes (--wanted_words, --unknown_percent, --silence_percent)
# --- and the background recordings.

WORDS = ("yes", "no", "up", "down", "left")


@pytest.fixture
def words_data(tmp_path):
  return write_tone_dataset(tmp_path / "words", labels=WORDS, per_label=30, seconds=0.1)


def test_unknown_and_silence_as_the_reference_recipe(words_data):
  params = Params(data_dir=words_data, wanted_words=("yes", "no"), unknown_percent=25.0,
                  silence_percent=10.0)
  m = manifest.load(params)
  assert m.labels == ("_silence_", "_unknown_", "no", "yes")
  every = manifest.load(Params(data_dir=words_data))
  for split in ("train", "validation", "test"):
    files = every.split(split)
    wanted = [e for e in files if e.label in ("yes", "no")]
    others = [e for e in files if e.label not in ("yes", "no")]
    got = m.split(split)
    by_label = {label: [e for e in got if e.label == label] for label in m.labels}
    assert [e.path for e in by_label["yes"] + by_label["no"]] == [
        e.path for e in wanted if e.label == "yes"] + [e.path for e in wanted if e.label == "no"]
    # ceil(25% of the wanted clips) unknowns, drawn from the other words only, relabelled.
    assert len(by_label["_unknown_"]) == min(len(others), -(-len(wanted) * 25 // 100)) > 0
    assert {e.path for e in by_label["_unknown_"]} <= {e.path for e in others}
    assert len(by_label["_silence_"]) == -(-len(wanted) * 10 // 100) > 0
    assert all(e.virtual and e.split == split for e in by_label["_silence_"])
    assert got[-len(by_label["_silence_"]):] == by_label["_silence_"]  # Files first, then silence.
    assert m.files(split) == [e for e in got if not e.virtual]
  # About 25% of the wanted clips over the whole data (each split rounds up).
  wanted_all = sum(e.label in ("yes", "no") for e in m.examples)
  assert sum(e.label == "_unknown_" for e in m.examples) / wanted_all == pytest.approx(0.25, abs=0.05)


def test_unknown_choice_is_stable_across_runs_and_copies(words_data, tmp_path):
  import shutil
  params = Params(data_dir=words_data, wanted_words=("yes",), unknown_percent=50.0)
  chosen = lambda m, root: sorted(os.path.relpath(e.path, root) for e in m.examples
                                  if e.label == "_unknown_")
  first = chosen(manifest.load(params), words_data)
  assert first == chosen(manifest.load(params), words_data)
  copy = shutil.copytree(words_data, tmp_path / "copy")
  assert chosen(manifest.load(params.replace(data_dir=str(copy))), copy) == first
  # Another share picks more of the same order: the 50% set holds the 25% one.
  fewer = chosen(manifest.load(params.replace(unknown_percent=25.0)), words_data)
  assert set(fewer) < set(first)
  # No unknown share: the other words are left out altogether, as the recipe does.
  m = manifest.load(params.replace(unknown_percent=0.0, silence_percent=5.0))
  assert m.labels == ("_silence_", "yes")


def test_silence_without_wanted_words_keeps_every_label(words_data):
  m = manifest.load(Params(data_dir=words_data, silence_percent=10.0))
  assert m.labels == ("_silence_",) + tuple(sorted(WORDS))
  assert sum(e.virtual for e in m.examples) == sum(
      -(-len(manifest.load(Params(data_dir=words_data)).split(s)) * 10 // 100)
      for s in ("train", "validation", "test"))


def test_a_wanted_word_that_is_no_label_is_named(words_data):
  with pytest.raises(manifest.DataError, match=r"--wanted_words stop not among the labels"):
    manifest.load(Params(data_dir=words_data, wanted_words=("yes", "stop")))


def test_background_recordings_found_and_never_a_label(words_data, tmp_path):
  import soundfile as sf
  import numpy as np
  noise = os.path.join(words_data, manifest.NOISE_FOLDER)
  os.makedirs(noise)
  for name in ("b.wav", "a.flac"):
    sf.write(os.path.join(noise, name), np.zeros(1600, np.float32), 16000)
  open(os.path.join(noise, "README.md"), "w").write("not audio")
  m = manifest.load(Params(data_dir=words_data))
  assert m.labels == tuple(sorted(WORDS))
  assert [os.path.basename(e.path) for e in m.noise] == ["a.flac", "b.wav"]
  other = tmp_path / "elsewhere"
  other.mkdir()
  sf.write(other / "rain.ogg", np.zeros(1600, np.float32), 16000)
  m = manifest.load(Params(data_dir=words_data, noise_dir=str(other)))
  assert [os.path.basename(e.path) for e in m.noise] == ["rain.ogg"]
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(manifest.DataError, match="noise_dir .*empty.* holds no audio files"):
    manifest.load(Params(data_dir=words_data, noise_dir=str(empty)))
  with pytest.raises(manifest.DataError, match="noise_dir .*missing.* does not exist"):
    manifest.load(Params(data_dir=words_data, noise_dir=str(tmp_path / "missing")))
  # A recording that cannot be read gets the bad-file treatment of any clip.
  os.symlink(tmp_path / "gone.wav", os.path.join(noise, "c.wav"))
  with pytest.raises(manifest.DataError, match=r"cannot read audio file .*c\.wav"):
    manifest.load(Params(data_dir=words_data))
  m = manifest.load(Params(data_dir=words_data, on_bad_file="skip"))
  assert [os.path.basename(e.path) for e in m.noise] == ["a.flac", "b.wav"]


def test_csv_header_may_name_more_columns_for_group_by(tmp_path, tone_data):
  rel = os.path.relpath(tone_data, tmp_path)
  csv = tmp_path / "m.csv"
  csv.write_text("path,speaker,label,split\n"
                 f"{rel}/low/spk000low_nohash_0.wav,ann,low,train\n"
                 f"{rel}/low/spk001low_nohash_0.wav,bob,low,\n"
                 f"{rel}/mid/spk000mid_nohash_0.wav,ann,mid,test\n")
  params = Params(manifest=str(csv))
  m = manifest.load(params)
  assert [(e.label, e.split) for e in m.examples] == [
      ("low", "train"), ("low", manifest.which_split("spk001low_nohash_0.wav", 10, 10)),
      ("mid", "test")]
  assert manifest.groups(params, m.examples, "speaker") == ["ann", "bob", "ann"]
  assert manifest.groups(params.replace(manifest=None, data_dir=tone_data), m.examples,
                         "speaker") == ["spk000low", "spk001low", "spk000mid"]
  with pytest.raises(manifest.DataError, match=r"--group_by=mic: .*group by speaker$"):
    manifest.groups(params, m.examples, "mic")


@pytest.mark.parametrize("content, match", [
    ("path,label,speaker\na.wav,low\n", r"m\.csv:2: expected the header's 3 columns"),
    ("path,speaker\na.wav,ann\n", r"m\.csv:1: a header must name path, label"),
    ("path,label,speaker,speaker\na.wav,low,a,b\n", r"m\.csv:1: a header must name .* once each"),
])
def test_csv_header_problems_name_the_line(tmp_path, content, match):
  (tmp_path / "m.csv").write_text(content)
  with pytest.raises(manifest.DataError, match=match):
    manifest.load(Params(manifest=str(tmp_path / "m.csv")))


# --- A few recordings of one's own beside the data (--extra_train_dir).


def test_extra_train_files_join_the_train_split_only(tmp_path, tone_data):
  extra = write_tone_dataset(tmp_path / "mine", labels=("low", "high"), per_label=3, seconds=0.1)
  plain = manifest.load(Params(data_dir=tone_data))
  m = manifest.load(Params(data_dir=tone_data, extra_train_dir=extra))
  added = [e for e in m.examples if e.path.startswith(os.path.abspath(extra))]
  assert len(added) == 6 and {e.split for e in added} == {"train"}
  assert {e.label for e in added} == {"low", "high"} and m.labels == plain.labels
  for split in ("validation", "test"):
    assert m.split(split) == plain.split(split)
  assert len(m.split("train")) == len(plain.split("train")) + 6


def test_extra_train_labels_must_be_the_datas(tmp_path, tone_data):
  extra = write_tone_dataset(tmp_path / "mine", labels=("low", "bird"), per_label=1, seconds=0.1)
  with pytest.raises(manifest.DataError, match=r"labels the data does not: bird \(the data has "):
    manifest.load(Params(data_dir=tone_data, extra_train_dir=extra))
  with pytest.raises(manifest.DataError, match="does not exist"):
    manifest.load(Params(data_dir=tone_data, extra_train_dir=str(tmp_path / "none")))
  os.makedirs(tmp_path / "empty" / "low")
  with pytest.raises(manifest.DataError, match="holds no label folders with audio"):
    manifest.load(Params(data_dir=tone_data, extra_train_dir=str(tmp_path / "empty")))
