"""Background noise from recordings, and the _unknown_ / _silence_ classes, through input_fn."""

import os
import shutil

import numpy as np
import pytest
import soundfile as sf
import tensorflow as tf

import audioclf
from audioclf.data import decode
from audioclf.data import manifest as manifest_lib
from audioclf.data import fill as fill_lib
from audioclf.data import pipeline
from audioclf.data import noise as noise_lib
from conftest import write_tone_dataset

SR = 16000


def _recording(seconds, freq, seed):
  rng = np.random.default_rng(seed)
  t = np.arange(int(seconds * SR)) / SR
  return (0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


@pytest.fixture
def noisy(tmp_path):
  """Tones in 4 classes, and a _background_noise_ folder: a 3 s FLAC and a 2 s float WAV."""
  data = write_tone_dataset(tmp_path / "data", labels=("a", "b", "c", "d"), per_label=10)
  folder = os.path.join(data, manifest_lib.NOISE_FOLDER)
  os.makedirs(folder)
  sf.write(os.path.join(folder, "hum.flac"), _recording(3.0, 120.0, 1), SR)
  sf.write(os.path.join(folder, "hiss.wav"), _recording(2.0, 5000.0, 2), SR, subtype="FLOAT")
  return audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=8,
                         clip_seconds=0.5, validation_percent=25, testing_percent=0,
                         noise_prob=1.0, noise_snr_db=(0.0, 10.0))


def _batches(params, mode="train", steps=3):
  return [(f["waveform"].numpy(), y.numpy())
          for f, y in audioclf.input_fn(params, mode).take(steps)]


def test_excerpts_come_from_the_recordings_where_the_draws_say():
  rec = np.arange(1, 101, dtype=np.float32)
  short = np.arange(1001, 1011, dtype=np.float32)
  recordings = noise_lib.Recordings(tf.constant(np.concatenate([rec, short])),
                                    np.array([0, 100]), np.array([100, 10]), None,
                                    np.array([1.0, 2.0]))
  which = tf.constant([0.0, 0.49, 0.5, 0.99], tf.float64)
  where = tf.constant([0.0, 0.999, 0.5, 0.7], tf.float64)
  got = recordings.excerpts(which, where, 20).numpy()
  np.testing.assert_array_equal(got[0], rec[:20])
  np.testing.assert_array_equal(got[1], rec[80:])  # The last excerpt that fits.
  # A recording shorter than the clip: all of it, then zeros.
  np.testing.assert_array_equal(got[2], np.concatenate([short, np.zeros(10)]))
  np.testing.assert_array_equal(got[3], got[2])


def test_noise_is_an_excerpt_at_the_drawn_level(noisy):
  clean = _batches(noisy.replace(noise_prob=0.0))
  mixed = _batches(noisy)
  for (wc, yc), (wm, ym) in zip(clean, mixed):
    np.testing.assert_array_equal(yc, ym)
    added = wm - wc
    # The SNR is against the whole recording's level; these excerpts are steady, within 0.1 dB.
    snr = 10 * np.log10(np.mean(wc ** 2, 1) / np.mean(added ** 2, 1))
    assert np.all((snr > -0.1) & (snr < 10.1)), snr
    # Not white noise: each excerpt is the hum's 120 Hz or the hiss's 5 kHz.
    spectrum = np.abs(np.fft.rfft(added, axis=1))
    peak_hz = np.argmax(spectrum, axis=1) * SR / added.shape[1]
    assert set(np.round(peak_hz, -1)) <= {120.0, 5000.0}, peak_hz
  peaks = np.concatenate([np.argmax(np.abs(np.fft.rfft(m - c, axis=1)), 1)
                          for (c, _), (m, _) in zip(clean, mixed)])
  assert len(set(peaks)) == 2  # Both recordings are drawn.


def test_same_seed_same_batches_cold_and_warm_and_decoded_once(noisy):
  before = pipeline.PROCESS.decodes.count
  cold = _batches(noisy, steps=6)  # Past the first epoch: the cold pass, then its warm cut.
  # 2 recordings + 30 training files, each decoded (or read from source) once.
  decoded = pipeline.PROCESS.decodes.count - before
  train_files = len(manifest_lib.load(noisy).split("train"))
  assert decoded == 2 + train_files
  warm = _batches(noisy, steps=6)
  assert pipeline.PROCESS.decodes.count - before == decoded  # Nothing decoded again.
  for (wa, ya), (wb, yb) in zip(cold, warm):
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ya, yb)
  other = _batches(noisy.replace(seed=1), steps=1)
  assert not np.array_equal(other[0][0], warm[0][0])


def test_never_read_from_disk_per_step(noisy):
  ds = audioclf.input_fn(noisy, "train")
  first = [f["waveform"].numpy() for f, _ in ds.take(2)]
  shutil.rmtree(os.path.join(noisy.data_dir, manifest_lib.NOISE_FOLDER))
  again = [f["waveform"].numpy() for f, _ in ds.take(2)]  # The cache's copy: same bits.
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)


def test_noise_dir_takes_any_folder(noisy, tmp_path):
  other = tmp_path / "elsewhere"
  other.mkdir()
  sf.write(other / "low.ogg", _recording(2.0, 300.0, 3), SR)
  params = noisy.replace(noise_dir=str(other))
  clean, mixed = _batches(params.replace(noise_prob=0.0), steps=1), _batches(params, steps=1)
  added = mixed[0][0] - clean[0][0]
  peak_hz = np.argmax(np.abs(np.fft.rfft(added, axis=1)), axis=1) * SR / added.shape[1]
  assert set(np.round(peak_hz, -1)) == {300.0}


def test_a_bad_recording_gets_the_bad_file_treatment(noisy, caplog):
  bad = os.path.join(noisy.data_dir, manifest_lib.NOISE_FOLDER, "broken.flac")
  flac = open(os.path.join(noisy.data_dir, manifest_lib.NOISE_FOLDER, "hum.flac"), "rb").read()
  open(bad, "wb").write(flac[:len(flac) // 3])
  with pytest.raises(decode.BadAudioError, match="broken.flac"):
    audioclf.input_fn(noisy, "train")
  params = noisy.replace(on_bad_file="skip")
  clean = _batches(params.replace(noise_prob=0.0), steps=2)
  mixed = _batches(params, steps=2)
  assert any("broken.flac" in r.getMessage() for r in caplog.records)
  assert any("1 of 3 background recordings were skipped" in r.getMessage() for r in caplog.records)
  added = np.concatenate([m - c for (c, _), (m, _) in zip(clean, mixed)])
  peak_hz = np.argmax(np.abs(np.fft.rfft(added, axis=1)), axis=1) * SR / added.shape[1]
  assert set(np.round(peak_hz, -1)) <= {120.0, 5000.0}


def test_without_recordings_white_noise_remains(noisy):
  shutil.rmtree(os.path.join(noisy.data_dir, manifest_lib.NOISE_FOLDER))
  clean, mixed = _batches(noisy.replace(noise_prob=0.0), steps=1), _batches(noisy, steps=1)
  added = mixed[0][0] - clean[0][0]
  spectrum = np.abs(np.fft.rfft(added, axis=1)) ** 2
  low, high = spectrum[:, 1:spectrum.shape[1] // 2].sum(1), spectrum[:, spectrum.shape[1] // 2:].sum(1)
  assert np.all((low / high > 0.8) & (low / high < 1.25))  # Flat: white.


def test_unknown_and_silence_classes_through_input_fn(noisy):
  params = noisy.replace(wanted_words=("a", "b"), unknown_percent=50.0, silence_percent=25.0,
                         noise_prob=0.0, validation_percent=30)
  m = manifest_lib.load(params)
  assert m.labels == ("_silence_", "_unknown_", "a", "b")
  silence = m.label_id("_silence_")
  evals = [[(f["waveform"].numpy(), y.numpy()) for f, y in audioclf.input_fn(params, "eval")]
           for _ in range(2)]
  waves = np.concatenate([w for w, _ in evals[0]])
  labels = np.concatenate([y for _, y in evals[0]])
  assert labels.tolist() == [m.label_id(e.label) for e in m.split("validation")]
  assert np.bincount(labels, minlength=4).tolist() == [
      sum(e.label == name for e in m.split("validation")) for name in m.labels]
  quiet = waves[labels == silence]
  # Silence clips: a background excerpt at a gain in [0, 1) of the recording's level, not
  # digital silence, and the same clips in every evaluation.
  rms = np.sqrt(np.mean(quiet ** 2, 1))
  assert len(quiet) > 0 and np.all(rms > 0) and np.all(rms < 0.3)
  np.testing.assert_array_equal(waves, np.concatenate([w for w, _ in evals[1]]))
  # Words in evaluation get no noise: they are the clips as cached.
  clean = params.replace(silence_percent=0.0)
  words = np.concatenate([f["waveform"].numpy() for f, _ in audioclf.input_fn(clean, "eval")])
  np.testing.assert_array_equal(waves[labels != silence], words)
  # Training (noise_prob=0): silence clips still get noise, and only they.
  for w, y in _batches(params, steps=4):
    assert np.all(np.sqrt(np.mean(w[y == silence] ** 2, 1)) > 0)


def test_fill_fills_the_recordings_ahead(noisy):
  from audioclf.data import fill as fill_lib
  report = fill_lib.fill(noisy)
  assert report["noise"] == {"files": 2, "kept": 2, "decoded": 2, "was_cached": False}
  before = pipeline.PROCESS.decodes.count
  _batches(noisy, steps=1)
  assert pipeline.PROCESS.decodes.count == before  # Training decodes nothing: all of it is cached.
  assert "noise" not in fill_lib.fill(noisy.replace(noise_prob=0.0))


def test_a_read_only_cache_mixes_the_same_noise(noisy, tmp_path):
  from test_exit import tmpfs
  want = _batches(noisy.replace(cache_dir=str(tmp_path / "rw")), steps=2)
  with tmpfs(tmp_path / "ro", "1m", "ro"):
    got = _batches(noisy.replace(cache_dir=str(tmp_path / "ro")), steps=2)  # Decoded in memory.
    assert os.listdir(tmp_path / "ro") == []
  for (wa, ya), (wb, yb) in zip(want, got):
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ya, yb)
