"""python -m pytest -q tests/test_make_speech_words.py

Checks tools/make_speech_words.py on a tiny dataset (2 words x 3 clips): layout, wav format,
audible and speaker-dependent content, byte-for-byte determinism and reuse of a finished run.
"""

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("espeakng_loader")

_TOOL = Path(__file__).resolve().parents[1] / "tools" / "make_speech_words.py"
_spec = importlib.util.spec_from_file_location("make_speech_words", _TOOL)
msw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(msw)

WORDS = ["yes", "no"]
PER_WORD = 3
NAME_RE = re.compile(r"([0-9a-f]{8})_nohash_(\d+)\.wav")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
  out = tmp_path_factory.mktemp("speech") / "words"
  paths = msw.generate(out, WORDS, PER_WORD, seed=0, progress=False)
  return out, paths


def _frame_rms(x, frame=320):
  return np.sqrt(np.mean(x[: len(x) // frame * frame].reshape(-1, frame) ** 2, axis=1))


def test_layout(dataset):
  out, paths = dataset
  assert len(paths) == len(WORDS) * PER_WORD
  assert sorted(p.name for p in out.iterdir()) == sorted(WORDS + [msw.STAMP_NAME])
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


def test_wav_format_and_content(dataset):
  _, paths = dataset
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


def test_speakers_differ(dataset):
  out, paths = dataset
  stamp = json.loads((out / msw.STAMP_NAME).read_text())
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


def test_deterministic(dataset, tmp_path):
  out, paths = dataset
  again = msw.generate(tmp_path / "again", WORDS, PER_WORD, seed=0, progress=False)
  assert [Path(p).relative_to(tmp_path / "again") for p in again] == [
      Path(p).relative_to(out) for p in paths]
  for a, b in zip(paths, again):
    assert Path(a).read_bytes() == Path(b).read_bytes()
  other = msw.generate(tmp_path / "other", WORDS, PER_WORD, seed=1, progress=False)
  assert Path(other[0]).read_bytes() != Path(paths[0]).read_bytes()


def test_reuse_does_not_rewrite(dataset, capsys):
  out, paths = dataset
  before = {p: Path(p).stat().st_mtime_ns for p in paths + [str(out / msw.STAMP_NAME)]}
  assert msw.generate(out, WORDS, PER_WORD, seed=0, progress=False) == paths
  rc = msw.main(["--out_dir", str(out), "--words", ",".join(WORDS),
                 "--per_word", str(PER_WORD), "--seed", "0"])
  assert rc == 0 and "reusing" in capsys.readouterr().out
  assert {p: Path(p).stat().st_mtime_ns for p in before} == before


def test_clear_errors(tmp_path, monkeypatch, capsys):
  with pytest.raises(msw.SpeechWordsError, match="cannot synthesize"):
    msw.generate(tmp_path / "bad", ["yes", "???"], 1, seed=0, progress=False)
  (tmp_path / "foreign").mkdir()
  (tmp_path / "foreign" / "keep.txt").write_text("not ours")
  argv = ["--out_dir", str(tmp_path / "foreign"), "--words", "yes", "--per_word", "1"]
  assert msw.main(argv) == 1
  assert "not written by this tool" in capsys.readouterr().err
  assert (tmp_path / "foreign" / "keep.txt").exists()
  monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # find_spec() -> None
  with pytest.raises(msw.SpeechWordsError, match=r"pip install 'audioclf\[demo\]'"):
    msw.generate(tmp_path / "nolib", ["yes"], 1, seed=0, progress=False)


# --- --background_noise: Speech Commands' _background_noise_ folder, generated.

NOISE_SECONDS = 3.0


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
  out = tmp_path_factory.mktemp("noisy") / "words"
  msw.generate(out, WORDS, 2, seed=0, progress=False, background_noise=True,
               noise_seconds=NOISE_SECONDS)
  return out, {Path(p).stem: p for p in msw.noise_paths(out)}


def _band_power(x, lo, hi):
  spec = np.abs(np.fft.rfft(x)) ** 2
  freqs = np.fft.rfftfreq(len(x), 1 / 16000)
  return spec[(freqs >= lo) & (freqs < hi)].sum()


def test_background_noise_layout(noisy):
  out, noise = noisy
  assert sorted(noise) == ["babble", "brown_noise", "hum_50hz", "hum_60hz", "pink_noise",
                           "white_noise"]
  assert sorted(p.name for p in out.iterdir()) == sorted(WORDS + [msw.NOISE_DIR, msw.STAMP_NAME])
  for path in noise.values():
    assert Path(path).parent == out / msw.NOISE_DIR
    info = sf.info(path)
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    assert info.frames == NOISE_SECONDS * 16000
    x, _ = sf.read(path)
    assert 20 * np.log10(np.sqrt(np.mean(x ** 2))) == pytest.approx(msw.NOISE_RMS_DBFS, abs=0.1)


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
  msw.generate(again, WORDS, 2, seed=0, progress=False, background_noise=True,
               noise_seconds=NOISE_SECONDS)
  for name, path in noise.items():
    assert (again / msw.NOISE_DIR / f"{name}.wav").read_bytes() == Path(path).read_bytes(), name
  stamp = (out / msw.STAMP_NAME).stat().st_mtime_ns
  msw.generate(out, WORDS, 2, seed=0, progress=False, background_noise=True,
               noise_seconds=NOISE_SECONDS)
  assert (out / msw.STAMP_NAME).stat().st_mtime_ns == stamp  # Reused, not rewritten.
  # A missing recording is noticed: the dataset is written again, whole.
  (again / msw.NOISE_DIR / "babble.wav").unlink()
  msw.generate(again, WORDS, 2, seed=0, progress=False, background_noise=True,
               noise_seconds=NOISE_SECONDS)
  assert (again / msw.NOISE_DIR / "babble.wav").read_bytes() == Path(noise["babble"]).read_bytes()
  other = msw.generate(tmp_path / "other", WORDS, 2, seed=1, progress=False,
                       background_noise=True, noise_seconds=NOISE_SECONDS)
  assert (Path(other[0]).parents[1] / msw.NOISE_DIR / "pink_noise.wav").read_bytes() != (
      Path(noise["pink_noise"]).read_bytes())


# --- --held_out_speakers: unseen voices, beyond the training speakers' rate and pitch.

HELD_OUT = 2


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
  out = tmp_path_factory.mktemp("held") / "words"
  paths = msw.generate(out, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  return out, paths


def test_held_out_speakers_leave_the_word_clips_as_they_were(dataset, held_out):
  (out, paths), (plain, plain_paths) = held_out, dataset
  assert [Path(p).relative_to(out) for p in paths] == [Path(p).relative_to(plain)
                                                       for p in plain_paths]
  for a, b in zip(paths, plain_paths):
    assert Path(a).read_bytes() == Path(b).read_bytes()
  assert sorted(p.name for p in out.iterdir()) == sorted(WORDS + [msw.HELD_OUT_DIR,
                                                                 msw.STAMP_NAME])


def test_held_out_speakers_are_a_test_split_of_voices_beyond_the_training_range(held_out):
  out, _ = held_out
  held = [Path(p) for p in msw.held_out_paths(out)]
  # Each says each word as often as a training speaker (3 clips, 3 speakers: once).
  assert len(held) == len(WORDS) * HELD_OUT
  stamp = json.loads((out / msw.STAMP_NAME).read_text())
  speakers, unseen = stamp["speakers"], stamp["held_out_speakers"]
  assert len(unseen) == HELD_OUT and not set(unseen) & set(speakers)
  assert not {s["voice"] for s in unseen.values()} & {s["voice"] for s in speakers.values()}
  for s in unseen.values():
    assert not msw.RATE_WPM[0] * 0.93 <= s["rate"] <= msw.RATE_WPM[1] * 1.07 + 1, s
    assert not msw.PITCH[0] - 3 <= s["pitch"] <= msw.PITCH[1] + 3, s
  for p in held:
    assert p.parents[1] == out / msw.HELD_OUT_DIR and NAME_RE.fullmatch(p.name)
    assert NAME_RE.fullmatch(p.name).group(1) in unseen
    assert sf.info(str(p)).frames == 16000
  listed = (out / msw.HELD_OUT_DIR / "testing_list.txt").read_text().split()
  assert listed == [str(p.relative_to(out / msw.HELD_OUT_DIR)) for p in held]

  from audioclf import Params
  from audioclf.data import manifest
  trained_on = manifest.load(Params(data_dir=str(out)))
  assert list(trained_on.labels) == sorted(WORDS)
  assert not any(msw.HELD_OUT_DIR in e.path for e in trained_on.examples)
  unseen_data = manifest.load(Params(data_dir=str(out / msw.HELD_OUT_DIR)))
  assert unseen_data.labels == trained_on.labels
  assert unseen_data.counts() == {"train": 0, "validation": 0, "test": len(held)}


def test_held_out_speakers_are_deterministic_and_reused(held_out, tmp_path, capsys):
  out, _ = held_out
  again = tmp_path / "again"
  msw.generate(again, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  for a, b in zip(msw.held_out_paths(out), msw.held_out_paths(again)):
    assert Path(a).read_bytes() == Path(b).read_bytes()
  stamp = (again / msw.STAMP_NAME).stat().st_mtime_ns
  msw.generate(again, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  assert (again / msw.STAMP_NAME).stat().st_mtime_ns == stamp  # Reused, not rewritten.
  Path(msw.held_out_paths(again)[0]).unlink()  # A missing clip is noticed: written again.
  msw.generate(again, WORDS, PER_WORD, seed=0, progress=False, held_out_speakers=HELD_OUT)
  assert Path(msw.held_out_paths(again)[0]).read_bytes() == Path(
      msw.held_out_paths(out)[0]).read_bytes()
  rc = msw.main(["--out_dir", str(again), "--words", ",".join(WORDS), "--per_word", str(PER_WORD),
                 "--seed", "0", "--held_out_speakers", str(HELD_OUT)])
  printed = capsys.readouterr().out
  assert rc == 0 and "reusing" in printed
  assert f"{len(WORDS) * HELD_OUT} clips of {HELD_OUT} held-out speakers" in printed
