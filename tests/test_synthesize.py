"""python -m pytest -q tests/test_synthesize.py

Checks audioclf.synthesis on a tiny dataset (2 words x 3 clips): layout, wav format, audible and
speaker-dependent content, byte-for-byte determinism and reuse of a finished run, background
noise, held-out speakers and `_unknown_` words; and `python -m audioclf synthesize` as a user
runs it: the same bytes twice, its JSON line, and one line naming the cause of each mistake.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from audioclf.synthesis import dataset, settings, speakers
from audioclf.synthesis import noise as noise_lib

pytest.importorskip("espeakng_loader")

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["yes", "no"]
PER_WORD = 3
NAME_RE = re.compile(r"([0-9a-f]{8})_nohash_(\d+)\.wav")


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp("speech") / "words"
  paths = dataset.generate(out, WORDS, PER_WORD, seed=0, progress=False)
  return out, paths


def _frame_rms(x, frame=320):
  return np.sqrt(np.mean(x[: len(x) // frame * frame].reshape(-1, frame) ** 2, axis=1))


def test_layout(dataset_dir):
  out, paths = dataset_dir
  assert len(paths) == len(WORDS) * PER_WORD
  assert sorted(p.name for p in out.iterdir()) == sorted(WORDS + [settings.STAMP_NAME])
  speakers_by_word = {}
  for p in map(Path, paths):
    assert p.parent.parent == out and p.exists()
    m = NAME_RE.fullmatch(p.name)
    assert m, p.name
    speakers_by_word.setdefault(p.parent.name, []).append(m.group(1))
  assert sorted(speakers_by_word) == sorted(WORDS)
  for spk in speakers_by_word.values():
    assert len(set(spk)) == PER_WORD  # fewer clips than speakers: one clip per speaker
  # Every word is said by the same speakers, so a speaker-hash split stays clean.
  assert set(speakers_by_word["yes"]) == set(speakers_by_word["no"])


def test_wav_format_and_content(dataset_dir):
  _, paths = dataset_dir
  for p in paths:
    info = sf.info(p)
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    assert info.frames == 16000
    x, _ = sf.read(p, dtype="float64")
    rms = _frame_rms(x)
    floor = np.percentile(rms, 10)
    assert np.abs(x).max() > 0.05, p  # not near-silence
    assert rms.max() > 4 * floor, p  # a word stands out of the background noise
    assert floor > 0, p  # background noise is there


def test_speakers_differ(dataset_dir):
  out, paths = dataset_dir
  stamp = json.loads((out / settings.STAMP_NAME).read_text())
  params = [tuple(sorted(v.items())) for v in stamp["speakers"].values()]
  assert len(set(params)) == len(params) == PER_WORD
  yes = [sf.read(p)[0] for p in paths if Path(p).parent.name == "yes"]

  def spectrum(x):
    # Average magnitude spectrum of the loudest frames: voice timbre, not noise or offset.
    frames = x[: 16000 // 512 * 512].reshape(-1, 512)
    loud = frames[np.argsort(-np.sum(frames ** 2, axis=1))[:8]]
    s = np.abs(np.fft.rfft(loud * np.hanning(512), axis=1)).mean(0)
    return s / np.linalg.norm(s)

  specs = [spectrum(x) for x in yes]
  for i in range(len(specs)):
    for j in range(i + 1, len(specs)):
      assert np.dot(specs[i], specs[j]) < 0.995, (i, j)


def test_deterministic(dataset_dir, tmp_path):
  out, paths = dataset_dir
  again = dataset.generate(tmp_path / "again", WORDS, PER_WORD, seed=0, progress=False)
  assert [Path(p).relative_to(tmp_path / "again") for p in again] == [
      Path(p).relative_to(out) for p in paths]
  for a, b in zip(paths, again):
    assert Path(a).read_bytes() == Path(b).read_bytes()
  other = dataset.generate(tmp_path / "other", WORDS, PER_WORD, seed=1, progress=False)
  assert Path(other[0]).read_bytes() != Path(paths[0]).read_bytes()


def test_reuse_does_not_rewrite(dataset_dir):
  out, paths = dataset_dir
  before = {p: Path(p).stat().st_mtime_ns for p in paths + [str(out / settings.STAMP_NAME)]}
  assert dataset.generate(out, WORDS, PER_WORD, seed=0, progress=False) == paths
  again = dataset.synthesize(out, settings.Settings(WORDS, PER_WORD, 0), progress=False)
  assert again.reused and list(again.files) == paths
  assert {p: Path(p).stat().st_mtime_ns for p in before} == before


def test_clear_errors(tmp_path, monkeypatch):
  with pytest.raises(settings.SynthesisError, match="cannot synthesize"):
    dataset.generate(tmp_path / "bad", ["yes", "???"], 1, seed=0, progress=False)
  (tmp_path / "foreign").mkdir()
  (tmp_path / "foreign" / "keep.txt").write_text("not ours")
  with pytest.raises(settings.SynthesisError, match="not written by audioclf synthesize"):
    dataset.generate(tmp_path / "foreign", ["yes"], 1, seed=0, progress=False)
  assert (tmp_path / "foreign" / "keep.txt").exists()
  monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # import -> ImportError
  with pytest.raises(settings.SynthesisError, match=r"pip install 'audioclf\[synthesize\]'"):
    dataset.generate(tmp_path / "nolib", ["yes"], 1, seed=0, progress=False)


# --- --background_noise: Speech Commands' _background_noise_ folder, generated.

NOISE_SECONDS = 3.0


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
  out = tmp_path_factory.mktemp("noisy") / "words"
  dataset.generate(out, WORDS, 2, seed=0, progress=False, background_noise=True,
                   noise_seconds=NOISE_SECONDS)
  return out, {Path(p).stem: p for p in dataset.noise_paths(out)}


def _band_power(x, lo, hi):
  spec = np.abs(np.fft.rfft(x)) ** 2
  freqs = np.fft.rfftfreq(len(x), 1 / 16000)
  return spec[(freqs >= lo) & (freqs < hi)].sum()


def test_background_noise_layout(noisy):
  out, noise = noisy
  assert sorted(noise) == ["babble", "brown_noise", "hum_50hz", "hum_60hz", "pink_noise",
                           "white_noise"]
  assert sorted(p.name for p in out.iterdir()) == sorted(WORDS + [settings.NOISE_DIR,
                                                                 settings.STAMP_NAME])
  for path in noise.values():
    assert Path(path).parent == out / settings.NOISE_DIR
    info = sf.info(path)
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    assert info.frames == NOISE_SECONDS * 16000
    x, _ = sf.read(path)
    level = 20 * np.log10(np.sqrt(np.mean(x ** 2)))
    assert level == pytest.approx(noise_lib.NOISE_RMS_DBFS, abs=0.1)


def test_background_noise_colours_and_hum(noisy):
  _, noise = noisy
  x = {name: sf.read(p)[0] for name, p in noise.items()}
  # Low (100-500 Hz) over high (2-6 kHz) band power: flat for white, 1/f and 1/f^2 beyond.
  tilt = {n: _band_power(x[n], 100, 500) / _band_power(x[n], 2000, 6000)
          for n in ("white_noise", "pink_noise", "brown_noise")}
  assert 0.05 < tilt["white_noise"] < 0.2  # The bands' widths: 400 / 4000 Hz.
  # Expected: 0.1 (white), ln 5 / ln 3 = 1.46 (pink), 0.008 / 0.00033 = 24 (brown).
  assert tilt["pink_noise"] > 8 * tilt["white_noise"]
  assert tilt["brown_noise"] > 10 * tilt["pink_noise"]
  for name, mains in (("hum_50hz", 50), ("hum_60hz", 60)):
    total = _band_power(x[name], 20, 8000)
    near = sum(_band_power(x[name], k * mains - 2, k * mains + 2) for k in range(1, 9))
    assert near > 0.95 * total, name  # Nearly all of it at the mains harmonics.
    assert _band_power(x[name], 2 * mains - 2, 2 * mains + 2) > 0.3 * total, name


def test_babble_is_speech_like(noisy):
  _, noise = noisy
  babble, white = sf.read(noise["babble"])[0], sf.read(noise["white_noise"])[0]
  # Talkers start and stop: its loudness in 20 ms frames spreads far wider than steady noise.
  spread = lambda x: np.std(np.log(_frame_rms(x) + 1e-9))
  assert spread(babble) > 3 * spread(white)
  # Speech energy: mostly below 4 kHz.
  assert _band_power(babble, 100, 4000) > 0.8 * _band_power(babble, 20, 8000)


@pytest.mark.slow
@pytest.mark.once  # numpy and soundfile: no TensorFlow.
def test_background_noise_deterministic_and_reused(noisy, tmp_path):
  out, noise = noisy
  again = tmp_path / "again"
  dataset.generate(again, WORDS, 2, seed=0, progress=False, background_noise=True,
                   noise_seconds=NOISE_SECONDS)
  for name, path in noise.items():
    written = (again / settings.NOISE_DIR / f"{name}.wav").read_bytes()
    assert written == Path(path).read_bytes(), name
  stamp = (out / settings.STAMP_NAME).stat().st_mtime_ns
  dataset.generate(out, WORDS, 2, seed=0, progress=False, background_noise=True,
                   noise_seconds=NOISE_SECONDS)
  assert (out / settings.STAMP_NAME).stat().st_mtime_ns == stamp  # Reused, not rewritten.
  # A missing recording is noticed: the dataset is written again, whole.
  (again / settings.NOISE_DIR / "babble.wav").unlink()
  dataset.generate(again, WORDS, 2, seed=0, progress=False, background_noise=True,
                   noise_seconds=NOISE_SECONDS)
  assert (again / settings.NOISE_DIR / "babble.wav").read_bytes() == Path(
      noise["babble"]).read_bytes()
  other = dataset.generate(tmp_path / "other", WORDS, 2, seed=1, progress=False,
                           background_noise=True, noise_seconds=NOISE_SECONDS)
  assert (Path(other[0]).parents[1] / settings.NOISE_DIR / "pink_noise.wav").read_bytes() != (
      Path(noise["pink_noise"]).read_bytes())


# --- --held_out_speakers: unseen voices, beyond the training speakers' rate and pitch.

HELD_OUT = 2


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
  out = tmp_path_factory.mktemp("held") / "words"
  paths = dataset.generate(out, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  return out, paths


def test_held_out_speakers_leave_the_word_clips_as_they_were(dataset_dir, held_out):
  (out, paths), (plain, plain_paths) = held_out, dataset_dir
  assert [Path(p).relative_to(out) for p in paths] == [Path(p).relative_to(plain)
                                                       for p in plain_paths]
  for a, b in zip(paths, plain_paths):
    assert Path(a).read_bytes() == Path(b).read_bytes()
  assert sorted(p.name for p in out.iterdir()) == sorted(WORDS + [settings.HELD_OUT_DIR,
                                                                 settings.STAMP_NAME])


def test_held_out_speakers_are_a_test_split_of_voices_beyond_the_training_range(held_out):
  out, _ = held_out
  held = [Path(p) for p in dataset.held_out_paths(out)]
  # Each says each word as often as a training speaker (3 clips, 3 speakers: once).
  assert len(held) == len(WORDS) * HELD_OUT
  stamp = json.loads((out / settings.STAMP_NAME).read_text())
  trained, unseen = stamp["speakers"], stamp["held_out_speakers"]
  assert len(unseen) == HELD_OUT and not set(unseen) & set(trained)
  assert not {s["voice"] for s in unseen.values()} & {s["voice"] for s in trained.values()}
  for s in unseen.values():
    assert not speakers.RATE_WPM[0] * 0.93 <= s["rate"] <= speakers.RATE_WPM[1] * 1.07 + 1, s
    assert not speakers.PITCH[0] - 3 <= s["pitch"] <= speakers.PITCH[1] + 3, s
  for p in held:
    assert p.parents[1] == out / settings.HELD_OUT_DIR and NAME_RE.fullmatch(p.name)
    assert NAME_RE.fullmatch(p.name).group(1) in unseen
    assert sf.info(str(p)).frames == 16000
  listed = (out / settings.HELD_OUT_DIR / "testing_list.txt").read_text().split()
  assert listed == [str(p.relative_to(out / settings.HELD_OUT_DIR)) for p in held]

  from audioclf import Params
  from audioclf.data import manifest
  trained_on = manifest.load(Params(data_dir=str(out)))
  assert list(trained_on.labels) == sorted(WORDS)
  assert not any(settings.HELD_OUT_DIR in e.path for e in trained_on.examples)
  unseen_data = manifest.load(Params(data_dir=str(out / settings.HELD_OUT_DIR)))
  assert unseen_data.labels == trained_on.labels
  assert unseen_data.counts() == {"train": 0, "validation": 0, "test": len(held)}


def test_held_out_speakers_are_deterministic_and_reused(held_out, tmp_path, capsys):
  out, _ = held_out
  again = tmp_path / "again"
  dataset.generate(again, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  for a, b in zip(dataset.held_out_paths(out), dataset.held_out_paths(again)):
    assert Path(a).read_bytes() == Path(b).read_bytes()
  stamp = (again / settings.STAMP_NAME).stat().st_mtime_ns
  dataset.generate(again, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  assert (again / settings.STAMP_NAME).stat().st_mtime_ns == stamp  # Reused, not rewritten.
  Path(dataset.held_out_paths(again)[0]).unlink()  # A missing clip is noticed: written again.
  dataset.generate(again, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  assert Path(dataset.held_out_paths(again)[0]).read_bytes() == Path(
      dataset.held_out_paths(out)[0]).read_bytes()
  made = dataset.synthesize(again, settings.Settings(WORDS, PER_WORD, 0,
                                                     held_out_speakers=HELD_OUT), progress=False)
  assert made.reused and len(made.held_out_files) == len(WORDS) * HELD_OUT


# --- --unknown_words: other words said by the same speakers, the label _unknown_.

UNKNOWN = ["cat", "dog"]


@pytest.fixture(scope="module")
def with_unknown(tmp_path_factory):
  out = tmp_path_factory.mktemp("unknown") / "words"
  return dataset.synthesize(out, settings.Settings(WORDS, 4, 0, speakers=2, held_out_speakers=1,
                                                   unknown_words=UNKNOWN), progress=False)


def test_unknown_words_are_other_words_by_the_same_speakers(with_unknown, dataset_dir):
  made, root = with_unknown, Path(with_unknown.root)
  assert len(made.unknown_files) == 4
  stamp = json.loads((root / settings.STAMP_NAME).read_text())
  said = [stamp["unknown_said"][str(Path(p).relative_to(root))] for p in made.unknown_files]
  assert sorted(said) == ["cat", "cat", "dog", "dog"]  # Each unknown word as often.
  ids = lambda paths: {NAME_RE.fullmatch(Path(p).name).group(1) for p in paths}
  assert ids(made.unknown_files) == ids(made.files)  # The words' own speakers.
  for p in made.unknown_files:
    assert Path(p).parent == root / settings.UNKNOWN_DIR and sf.info(p).frames == 16000
  # They leave the word clips as they were (same seed and speakers, without unknown words).
  plain = dataset.generate(root.parent / "plain", WORDS, 4, seed=0, speakers=2, progress=False)
  assert [Path(p).read_bytes() for p in plain] == [Path(p).read_bytes() for p in made.files]


def test_unknown_words_are_a_label_of_the_manifest_and_of_the_held_out_voices(with_unknown):
  from audioclf import Params
  from audioclf.data import manifest
  root = Path(with_unknown.root)
  trained_on = manifest.load(Params(data_dir=str(root)))
  assert trained_on.labels == tuple(sorted(WORDS + [manifest.UNKNOWN]))
  unseen = manifest.load(Params(data_dir=str(root / settings.HELD_OUT_DIR)))
  assert unseen.labels == trained_on.labels
  assert unseen.counts()["test"] == len(with_unknown.held_out_files) == 2 * (len(WORDS) + 1)
  # As Speech Commands' recipe: with --wanted_words, _unknown_'s clips are among the others.
  some = manifest.load(Params(data_dir=str(root), wanted_words=("yes",), unknown_percent=100.0))
  assert some.labels == (manifest.UNKNOWN, "yes")


def test_unknown_words_by_number_and_their_mistakes():
  assert settings.Settings(["one", "two"], unknown_words=["3"]).checked().unknown_words == (
      "yes", "no", "up")
  assert settings.Settings(["yes"], unknown_words="2").checked().unknown_words == ("no", "up")
  with pytest.raises(settings.SynthesisError, match="yes also among --words"):
    settings.Settings(["yes", "no"], unknown_words=["cat", "yes"]).checked()
  with pytest.raises(settings.SynthesisError, match="--unknown_words=999: choose 1 to"):
    settings.Settings(["yes"], unknown_words=["999"]).checked()


# --- python -m audioclf synthesize, as a user runs it.

CLI_WORDS = ("--words=yes,no", "--per_word=2", "--speakers=2", "--unknown_words=1")


def _synthesize(*args, env=None):
  return subprocess.run([sys.executable, "-m", "audioclf", "synthesize", *args],
                        capture_output=True, text=True, timeout=300, cwd=ROOT,
                        env=dict(os.environ, **(env or {})))


def _files(root: Path) -> dict[str, bytes]:
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
          if p.is_file()}


def test_command_writes_the_same_bytes_twice_and_says_so_in_json(tmp_path):
  runs = [_synthesize(*CLI_WORDS, "--seed=3", f"--out={tmp_path / name}") for name in "ab"]
  for run in runs:
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "speech words" in run.stderr  # tqdm's bar.
  summary = json.loads(runs[0].stdout.strip().splitlines()[-1])
  assert summary == dict(summary, out=str(tmp_path / "a"), words=2, clips=4, unknown_clips=2,
                         reused=False)
  first, second = _files(tmp_path / "a"), _files(tmp_path / "b")
  assert first == second and len(first) == 4 + 2 + 1  # Word clips, _unknown_, the stamp.
  assert sorted({Path(name).parts[0] for name in first}) == sorted(
      ["_generated.json", "_unknown_", "no", "yes"])
  again = _synthesize(*CLI_WORDS, "--seed=3", f"--out={tmp_path / 'a'}", "--noprogress")
  assert json.loads(again.stdout.strip().splitlines()[-1])["reused"] is True
  other = _synthesize(*CLI_WORDS, "--seed=4", f"--out={tmp_path / 'c'}", "--noprogress")
  assert other.returncode == 0, other.stderr[-2000:]
  first_yes = lambda root: sorted((root / "yes").iterdir())[0].read_bytes()
  assert first_yes(tmp_path / "c") != first_yes(tmp_path / "a")


@pytest.mark.parametrize("args, cause", [
    (("--words=",), "--words: no words given"),
    (("--words=yes,n?o",), "--words: cannot synthesize 'n?o'"),
    (("--words=yes,123456789012345678",), "cannot synthesize '123456789012345678'"),
    (("--words=yes", "--unknown_words=yes"), "--unknown_words: yes also among --words"),
    (("--words=yes", "--per_word=0"), "--per_word and --speakers must be at least 1"),
    (("--words=yes", "OUT_UNDER_A_FILE"), "cannot create it"),
    (("--words=yes", "NO_OUT"), "--out: say where to write the dataset"),
    (("--words=yes", "NO_ESPEAK"), "espeakng-loader is not installed; pip install"),
])
def test_command_mistakes_end_in_one_line_naming_the_cause(tmp_path, args, cause):
  env, out = {}, f"--out={tmp_path / 'out'}"
  if "OUT_UNDER_A_FILE" in args:
    (tmp_path / "file").write_text("")
    out = f"--out={tmp_path / 'file' / 'out'}"
  if "NO_ESPEAK" in args:  # A module of that name that fails to import, as a missing one does.
    (tmp_path / "espeakng_loader.py").write_text("raise ImportError('no espeakng_loader')\n")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
  given = [a for a in args if a.startswith("--")] + ([] if "NO_OUT" in args else [out])
  run = _synthesize(*given, "--noprogress", env=env)
  assert run.returncode == 1, run.stdout + run.stderr
  lines = run.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("audioclf: error: ") and cause in lines[0], lines
  assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))
