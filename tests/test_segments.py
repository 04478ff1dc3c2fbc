"""Long recordings: streamed windows, the segment rule, and spoken words found at their offsets."""

import csv
import json
import os
import shutil
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
import soundfile as sf
import soxr

from audioclf.data import decode
from audioclf.deploy import segments
from audioclf.deploy.segments import find_segments
from conftest import tone
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- The segment rule, on probability profiles of known shape.

def _profile(events, n_windows, hop, clip, labels, fires):
  """Probabilities per window: label c where fires(window_start, event) for one of its events."""
  p = np.zeros((n_windows, len(labels)))
  p[:, labels.index("silence")] = 1.0
  starts = np.arange(n_windows) * hop
  for i, t in enumerate(starts):
    for label, s, e in events:
      if fires(t, t + clip, s, e):
        p[i] = 0.02
        p[i, labels.index(label)] = 1.0 - 0.02 * (len(labels) - 1)
  return p, starts


LABELS = ["no", "silence", "yes"]
EVENTS = [("yes", 2.0, 2.5), ("no", 5.0, 5.4), ("yes", 8.3, 8.9)]


def test_a_model_that_needs_the_whole_word_gives_the_word():
  whole = lambda a, b, s, e: a <= s and e <= b
  p, starts = _profile(EVENTS, 120, 0.1, 1.0, LABELS, whole)
  found = find_segments(p, starts, LABELS, 1.0, background=["silence"])
  assert [(s.label, s.start, s.end) for s in found] == [(l, a, b) for l, a, b in EVENTS]


def test_a_model_that_hears_parts_gives_the_core_of_the_word():
  # Fires once 0.1 s of the word is inside the window, at either edge.
  part = lambda a, b, s, e: min(b, e) - max(a, s) >= 0.1 - 1e-9
  p, starts = _profile(EVENTS, 120, 0.1, 1.0, LABELS, part)
  found = find_segments(p, starts, LABELS, 1.0, background=["silence"])
  assert [s.label for s in found] == ["yes", "no", "yes"]
  for segment, (_, s, e) in zip(found, EVENTS):
    assert s <= segment.start <= segment.end <= e
    assert segment.start - s <= 0.15


def test_hysteresis_min_duration_and_background():
  labels = ["a", "b", "silence"]
  p = np.zeros((30, 3))
  p[:, 2] = 1.0
  p[2:10, 0] = [0.6, 0.9, 0.3, 0.28, 0.7, 0.8, 0.6, 0.4]  # One run: it dips but not below 0.25.
  p[13:20, 0] = [0.9, 0.9, 0.9, 0.2, 0.9, 0.9, 0.9]  # Two runs: 0.2 splits them.
  p[24:26, 1] = [0.95, 0.95]  # Two windows: shorter than MIN_SPAN (3 at hop 0.1), dropped.
  starts = np.arange(30) * 0.1
  found = find_segments(p, starts, labels, 1.0, threshold=0.5, background=["silence"])
  assert [(s.label, s.start, s.end) for s in found] == [
      ("a", 0.9, 1.2), ("a", 1.5, 2.3), ("a", 1.9, 2.7)]
  assert found[0].peak == pytest.approx(0.9)
  # At the default hop of half a clip one window is enough: b is kept.
  found = find_segments(p[::5], starts[::5], labels, 1.0, background=["silence"])
  assert {s.label for s in found} == {"a", "b"}
  # A background label is never a segment; without the list it is one, cut at the end.
  found = find_segments(p, starts, labels, 1.0, length=2.5)
  assert "silence" in {s.label for s in found}
  assert max(s.end for s in found) <= 2.5


# --- Streaming.

def test_windows_cut_a_stream_as_slices_of_the_whole():
  signal = np.arange(1003, dtype=np.float32)
  blocks = [signal[i:i + 97] for i in range(0, len(signal), 97)]
  got = list(segments.windows(blocks, clip=100, hop=30))
  starts = [s for s, _ in got]
  assert starts == list(range(0, 1003 - 100 + 30, 30))  # The tail is heard once.
  for start, window in got:
    expected = signal[start:start + 100]
    np.testing.assert_array_equal(window[:len(expected)], expected)
    assert not window[len(expected):].any()
  assert [s for s, _ in segments.windows([signal[:40]], clip=100, hop=50)] == [0]
  with pytest.raises(ValueError, match="hop"):
    list(segments.windows(blocks, clip=100, hop=101))


@pytest.mark.parametrize("rate,channels", [(16000, 1), (44100, 2)])
def test_stream_equals_decoding_the_whole_file(tmp_path, rate, channels):
  path = str(tmp_path / f"long_{rate}.flac")
  sf.write(path, tone(440.0, 25.0, rate, channels=channels), rate)
  whole = decode.decode_file(path, 16000)
  streamed = np.concatenate(list(segments.stream(path, 16000, block_seconds=3.0)))
  assert abs(len(streamed) - len(whole)) <= 1
  n = min(len(whole), len(streamed))
  np.testing.assert_allclose(streamed[:n], whole[:n], atol=1e-4 if rate != 16000 else 1e-6)
  assert segments.duration(path) == pytest.approx(25.0)


def test_stream_holds_a_block_not_the_file(tmp_path):
  path = str(tmp_path / "ten_minutes.wav")
  rate, seconds = 22050, 600
  with sf.SoundFile(path, "w", rate, 1, "PCM_16") as f:
    for _ in range(seconds // 30):
      f.write(tone(300.0, 30.0, rate))
  tracemalloc.start()
  try:
    total = sum(len(b) for b in segments.stream(path, 16000))
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert total == pytest.approx(seconds * 16000, abs=16)
  assert peak < seconds * 16000 * 4 / 10  # Under a tenth of the decoded file.


def test_stream_names_a_bad_file(tmp_path):
  (tmp_path / "broken.wav").write_bytes(b"RIFF not really")
  with pytest.raises(decode.BadAudioError, match="broken.wav"):
    list(segments.stream(str(tmp_path / "broken.wav"), 16000))


# --- End to end: spoken words at known offsets, a model trained here.

WORDS = ("yes", "no", "up", "down")
SR = 16000


def _synthesis():
  """audioclf.synthesis's modules: the words to train on and those of the recording."""
  pytest.importorskip("espeakng_loader")
  from audioclf.synthesis import dataset, espeak, speakers  # pylint: disable=g-import-not-at-top
  return dataset, espeak, speakers


def _noise(rng, n, level_db, pink):
  x = rng.standard_normal(n)
  if pink:
    spectrum = np.fft.rfft(x)
    spectrum[0] = 0.0
    spectrum[1:] /= np.sqrt(np.arange(1, len(spectrum)))
    x = np.fft.irfft(spectrum, n)
  return x / np.sqrt(np.mean(x ** 2)) * 10 ** (level_db / 20)


@pytest.fixture(scope="module")
def word_model(tmp_path_factory):
  """A keyword model over WORDS plus a "silence" class of quiet noise and noise bursts."""
  import audioclf
  dataset, _, _ = _synthesis()
  root = tmp_path_factory.mktemp("words")
  data = root / "data"
  dataset.generate(data, WORDS, 60, seed=0, progress=False)
  rng = np.random.default_rng(0)
  (data / "silence").mkdir()
  for i in range(90):
    x = _noise(rng, SR, rng.uniform(-70, -25), i % 2) if i % 6 else np.zeros(SR)
    if i % 3 == 1:  # A burst in a quiet floor: a sound, but not a word.
      a = int(rng.integers(0, SR // 2))
      x[a:a + SR // 2] += _noise(rng, SR // 2, rng.uniform(-40, -20), i % 2)
    sf.write(data / "silence" / f"noise{i:03d}_nohash_0.wav", x.astype(np.float32), SR,
             subtype="PCM_16")
  # Clips of 0.75 s hold every word (at most 0.6 s) and cost three quarters of 1 s ones.
  params = audioclf.Params(data_dir=str(data), cache_dir=str(root / "cache"),
                           model_dir=str(root / "model"), model_args={"width": 16},
                           spec_augment=False, clip_seconds=0.75, learning_rate=3e-3,
                           lr_schedule="cosine", batch_size=32, train_steps=300,
                           eval_every_steps=300, log_every_steps=100)
  metrics = audioclf.train(params)
  assert metrics["val_accuracy"] > 0.9
  return params


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
  """A 22.05 kHz stereo FLAC: words by unseen speakers at known offsets, in noise and silence."""
  import espeakng_loader  # pylint: disable=g-import-not-at-top
  _, espeak, speakers = _synthesis()
  rng = np.random.default_rng(1)
  pool = speakers.pool(speakers.available_voices(espeakng_loader.get_data_path()), 8, seed=7)
  audio = _noise(rng, 16 * SR, -55, True)
  words, t = [], 1.0
  for k, word in enumerate(["yes", "down", "no", "up", "yes", "no"]):
    job = speakers.job(pool[k], speakers.clip_rng(7 + k, word, 0, 1))
    header, raws = espeak.say(word, [job])
    speech = soxr.resample(raws[0].astype(np.float64) / 32768, header["sample_rate"], SR)
    speech *= 10 ** (-6 / 20) / np.abs(speech).max()
    audio[int(t * SR):int(t * SR) + len(speech)] += speech
    words.append((word, t, t + len(speech) / SR))
    t += len(speech) / SR + rng.uniform(1.2, 1.6)
    if k == 2:  # A burst of louder noise between two words.
      b = int((t - 0.9) * SR)
      audio[b:b + SR // 2] += _noise(rng, SR // 2, -30, False)
  audio = soxr.resample(audio[:int((t + 0.5) * SR)], SR, 22050)
  path = tmp_path_factory.mktemp("recording") / "words.flac"
  sf.write(path, np.stack([audio, 0.9 * audio], axis=1).astype(np.float32), 22050)
  return str(path), words


@pytest.mark.slow
def test_every_word_found_at_its_offset_and_nothing_else(word_model, recording):
  params = word_model
  path, words = recording
  [result] = segments.detect(params.model_dir, [path], hop_seconds=0.1, background=["silence"])
  found = result["segments"]
  for word, start, end in words:
    hits = [s for s in found if s.label == word and abs(s.start - start) <= 0.25]
    assert hits, f"{word!r} at {start:.2f} s not found in {found}"
  for s in found:  # Every segment lies on some word (none in the silence, noise or burst).
    assert any(s.start <= end + 0.25 and s.end >= start - 0.25 for _, start, end in words), s


def test_detect_refuses_a_hop_longer_than_a_clip(trained, tmp_path):
  from audioclf.params import ParamError
  params, _ = trained("keras")
  with pytest.raises(ParamError, match="--hop_seconds=0.6"):
    segments.detect(params.model_dir, [], hop_seconds=0.6)
  # Before any model is restored: a model_dir of its parameters alone says the same.
  shutil.copy(os.path.join(params.model_dir, "params.json"), tmp_path)
  with pytest.raises(ParamError, match="--hop_seconds=0.6"):
    segments.detect(str(tmp_path), [], hop_seconds=0.6)


@pytest.mark.slow
def test_predict_command_line_on_long_and_short_files(word_model, recording, tmp_path):
  params = word_model
  path, words = recording
  short = str(tmp_path / "short.wav")
  sf.write(short, np.zeros(SR // 2, np.float32), SR)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  out = tmp_path / "out.csv"
  proc = warm.run([sys.executable, "-m", "audioclf", "predict",
                   f"--model_dir={params.model_dir}", "--hop_seconds=0.1",
                   "--background_labels=silence", f"--output={out}", path, short],
                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [line.split("\t") for line in proc.stdout.strip().splitlines()]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])  # Last, as every command's.
  assert (summary["clips"], summary["long_files"], summary["output"]) == (1, 1, str(out))
  assert lines[0][:2] == [short, "silence"]  # A short file: one label, as before.
  long_lines = [line for line in lines if line[0] == path]
  heard = iter(line[3] for line in long_lines)
  assert all(word in heard for word, _, _ in words)  # Each word, in order, among the segments.
  with open(out) as f:
    rows = list(csv.DictReader(f))
  assert rows[0]["file"] == short and rows[0]["start"] == ""
  assert [float(r["start"]) for r in rows[1:]] == pytest.approx(
      [float(line[1]) for line in long_lines], abs=0.01)


def test_output_as_json(tmp_path, monkeypatch):
  from audioclf.commands import predict
  results = [{"file": "a.wav", "label": "yes", "probability": 0.9},
             {"file": "b.flac", "duration": 3.0,
              "segments": [{"start": 1.0, "end": 1.4, "label": "no", "peak": 0.8}]}]
  predict._write_output(str(tmp_path / "out.json"), results)  # pylint: disable=protected-access
  assert json.loads((tmp_path / "out.json").read_text()) == {"files": results}
  with pytest.raises(ValueError, match="csv or .json"):
    predict._write_output(str(tmp_path / "out.txt"), results)  # pylint: disable=protected-access
