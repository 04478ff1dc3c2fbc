"""Decoding: every format libsndfile reads equals soundfile + soxr, natively where possible; bad files."""

import os

import numpy as np
import pytest
import soundfile as sf
import soxr
import tensorflow as tf

import audioclf
from audioclf.data import pipeline
from audioclf.data import decode, decoders
from audioclf.data import store as store_lib
from audioclf.data.decoders import pcm16_wav
from conftest import tone

FORMATS = [  # (extension, soundfile format, subtype, endian)
    ("wav", "WAV", "PCM_U8", "FILE"),
    ("wav", "WAV", "PCM_16", "FILE"),
    ("wav", "WAV", "PCM_24", "FILE"),
    ("wav", "WAV", "PCM_32", "FILE"),
    ("wav", "WAV", "FLOAT", "FILE"),
    ("wav", "WAV", "ULAW", "FILE"),
    ("wav", "RF64", "PCM_16", "FILE"),
    ("wav", "WAV", "PCM_16", "BIG"),  # RIFX.
    ("aiff", "AIFF", "PCM_16", "FILE"),  # Big-endian.
    ("flac", "FLAC", "PCM_16", "FILE"),
    ("flac", "FLAC", "PCM_24", "FILE"),
    ("ogg", "OGG", "VORBIS", "FILE"),
]


def expected(path, sample_rate=16000):
  data, rate = sf.read(path, dtype="float32", always_2d=True)
  mono = data.mean(axis=1, dtype=np.float32)
  return soxr.resample(mono, rate, sample_rate, quality="HQ") if rate != sample_rate else mono


def eval_waveforms(params):
  return np.concatenate([f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "eval")])


@pytest.mark.slow
@pytest.mark.parametrize("ext, fmt, subtype, endian", FORMATS)
@pytest.mark.parametrize("rate, channels", [(16000, 1), (22050, 2)])
def test_every_format_equals_soundfile_resampled(tmp_path, ext, fmt, subtype, endian, rate, channels):
  paths = []
  for label, freq in (("a", 440.0), ("b", 1000.0)):
    os.makedirs(tmp_path / "d" / label)
    path = str(tmp_path / "d" / label / f"s_nohash_0.{ext}")
    sf.write(path, tone(freq, 0.5, rate, channels), rate, format=fmt, subtype=subtype,
             endian=endian)
    paths.append(path)
  want = [expected(p) for p in paths]
  n = max(len(w) for w in want)
  params = audioclf.Params(data_dir=str(tmp_path / "d"), cache_dir=str(tmp_path / "c"),
                           validation_percent=99.9, testing_percent=0, clip_seconds=n / 16000)
  for _ in range(2):  # Cold (decode and fill), then warm (read the cache).
    got = eval_waveforms(params)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g[:len(w)], w)  # The same bytes, not just close.
      assert not g[len(w):].any()


def test_native_fast_path_is_taken_and_matches_soundfile(tmp_path):
  path = str(tmp_path / "x.wav")
  sf.write(path, tone(440.0, 0.25, 16000), 16000, subtype="PCM_16")
  contents = tf.io.read_file(path)
  ok, samples = pcm16_wav.native_wav(contents, 16000)
  assert bool(ok)
  np.testing.assert_array_equal(samples.numpy(), sf.read(path, dtype="float32")[0])
  np.testing.assert_array_equal(pcm16_wav.decode(path, 16000), samples.numpy())
  assert not bool(pcm16_wav.native_wav(contents, 8000)[0])  # Needs resampling: soundfile path.
  for subtype in ("PCM_24", "FLOAT"):
    sf.write(path, tone(440.0, 0.25, 16000), 16000, subtype=subtype)
    assert not bool(pcm16_wav.native_wav(tf.io.read_file(path), 16000)[0])


@pytest.mark.parametrize("cut", [0, 10, 43, 44, 45, 1000])
def test_native_check_and_its_python_twin_agree(tmp_path, cut):
  path = str(tmp_path / "x.wav")
  sf.write(path, tone(440.0, 0.1, 16000), 16000, subtype="PCM_16")
  data = open(path, "rb").read()
  data = data[:-cut] if cut else data
  open(path, "wb").write(data)
  for rate in (16000, 8000):
    graph = bool(pcm16_wav.native_wav(tf.io.read_file(path), rate)[0])
    assert graph == pcm16_wav.header_ok(data[:44], len(data), rate)
    assert graph == (cut == 0 and rate == 16000)


def write_bad_files(folder):
  """One of each kind of broken file; returns {name: reason pattern}."""
  os.makedirs(folder, exist_ok=True)
  good = tone(440.0, 0.5, 16000)
  sf.write(os.path.join(folder, "whole.wav"), good, 16000, subtype="PCM_16")
  wav = open(os.path.join(folder, "whole.wav"), "rb").read()
  open(os.path.join(folder, "truncated.wav"), "wb").write(wav[:len(wav) // 2])
  open(os.path.join(folder, "empty.wav"), "wb").close()
  open(os.path.join(folder, "text.wav"), "w").write("this is not audio\n" * 50)
  sf.write(os.path.join(folder, "whole.flac"), good, 16000)
  flac = open(os.path.join(folder, "whole.flac"), "rb").read()
  open(os.path.join(folder, "truncated.flac"), "wb").write(flac[:len(flac) // 2])
  nan = good.copy()
  nan[100] = np.nan
  sf.write(os.path.join(folder, "nan.wav"), nan, 16000, subtype="FLOAT")
  sf.write(os.path.join(folder, "noframes.wav"), np.zeros(0, np.float32), 16000)
  os.remove(os.path.join(folder, "whole.wav"))
  os.remove(os.path.join(folder, "whole.flac"))
  return {"truncated.wav": "truncated", "empty.wav": "not recognised",
          "text.wav": "not recognised", "truncated.flac": "lost sync|truncated",
          "nan.wav": "NaN", "noframes.wav": "no audio frames"}


def test_decode_file_names_the_file_and_the_reason(tmp_path):
  for name, reason in write_bad_files(str(tmp_path)).items():
    with pytest.raises(decode.BadAudioError, match=reason) as info:
      decode.decode_file(str(tmp_path / name), 16000)
    assert info.value.path.endswith(name) and name in str(info.value)


def bad_dataset(tmp_path, bad_name):
  """Two good labels and one bad file in label a, everything in the validation split."""
  data = tmp_path / "d"
  for label in ("a", "b"):
    os.makedirs(data / label)
    for i in range(3):
      sf.write(str(data / label / f"s{i}_nohash_0.wav"), tone(440.0 + 200 * i, 0.5, 16000),
               16000, subtype="PCM_16")
  reasons = write_bad_files(str(tmp_path / "bad"))
  os.rename(tmp_path / "bad" / bad_name, data / "a" / bad_name)
  return str(data), reasons[bad_name]


@pytest.mark.parametrize("bad_name", ["truncated.wav", "empty.wav", "text.wav", "truncated.flac",
                                      "nan.wav"])
def test_bad_file_fails_with_its_name(tmp_path, bad_name):
  data, reason = bad_dataset(tmp_path, bad_name)
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "c"), validation_percent=99.9,
                           testing_percent=0)
  with pytest.raises(tf.errors.OpError, match=f"bad audio file .*{bad_name}.*({reason})"):
    eval_waveforms(params)
  assert not os.listdir(tmp_path / "c" / os.listdir(tmp_path / "c")[0] / "splits")


@pytest.mark.parametrize("bad_name", ["truncated.wav", "text.wav", "truncated.flac"])
def test_bad_file_is_skipped_logged_and_counted(tmp_path, bad_name, caplog):
  data, _ = bad_dataset(tmp_path, bad_name)
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "c"), validation_percent=99.9,
                           testing_percent=0, on_bad_file="skip", batch_size=2)
  cold = eval_waveforms(params)
  assert len(cold) == 6  # The six good files, not the bad one.
  assert any(bad_name in r.getMessage() and "skipping" in r.getMessage() for r in caplog.records)
  assert any("skipped 1 bad files of 7" in r.getMessage() for r in caplog.records)
  decoded = pipeline.PROCESS.decodes.count
  np.testing.assert_array_equal(eval_waveforms(params), cold)  # Warm: same six, no decoding.
  assert pipeline.PROCESS.decodes.count == decoded
  train = audioclf.input_fn(params, "train", split="validation")  # Same split: warm, still skipped.
  assert sum(int(y.shape[0]) for _, y in train.take(9)) == 18


def test_a_cold_training_run_skips_a_bad_file_in_every_epoch(tmp_path):
  data, _ = bad_dataset(tmp_path, "text.wav")
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "c"), validation_percent=0,
                           testing_percent=0, on_bad_file="skip", batch_size=4,
                           time_shift_seconds=0.0, clip_seconds=0.5)
  batches = list(audioclf.input_fn(params, "train").take(6))  # 24 examples: 4 epochs of 6.
  labels = np.concatenate([y.numpy() for _, y in batches])
  waves = np.concatenate([f["waveform"].numpy() for f, _ in batches])
  assert (labels >= 0).all()
  for epoch in range(4):  # The six good files once per epoch, never the bad one's silence.
    got = zip(waves[epoch * 6:(epoch + 1) * 6], labels[epoch * 6:(epoch + 1) * 6])
    assert len({(w.tobytes(), y) for w, y in got}) == 6
  assert np.abs(waves).max(axis=1).min() > 0.1


def test_a_split_mixing_native_wavs_and_other_files(tmp_path):
  """A canonical WAV after other files, and before: the split is stored as float32 either way."""
  for label, freq in (("a", 440.0), ("b", 1000.0)):
    os.makedirs(tmp_path / "d" / label)
    sf.write(str(tmp_path / "d" / label / "s1_nohash_0.wav"), tone(freq, 0.5, 16000), 16000,
             subtype="PCM_16")
    sf.write(str(tmp_path / "d" / label / "s2_nohash_0.flac"), tone(freq * 1.5, 0.5, 44100),
             44100)
  params = audioclf.Params(data_dir=str(tmp_path / "d"), cache_dir=str(tmp_path / "c"),
                           validation_percent=99.9, testing_percent=0, clip_seconds=0.5)
  paths = sorted(str(p) for p in (tmp_path / "d").glob("*/*"))
  want = [expected(p) for p in paths]
  for _ in range(2):  # Cold, then warm from the float32 split.
    got = eval_waveforms(params)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g[:len(w)], w[:len(g)])


def test_a_file_gets_the_decoder_its_format_has():
  assert decoders.for_path("/d/a/x.wav").name == "pcm16_wav"
  assert decoders.for_path("/d/a/x.WAVE").name == "pcm16_wav"
  for path in ("/d/a/x.flac", "/d/a/x.ogg", "/d/a/x"):
    assert decoders.for_path(path).name == "libsndfile"
  assert decoders.key() == ("libsndfile/1", "pcm16_wav/1")


def test_a_new_format_is_one_registered_decoder(monkeypatch, tmp_path):
  monkeypatch.setattr(decoders, "_REGISTERED", dict(decoders.registered()))
  before = store_lib.Store(str(tmp_path), 16000, "HQ").decode_key
  silent = decoders.register(decoders.Decoder(
      "silence", 1, (".sil",), lambda path, rate, quality: np.zeros(rate, np.float32)))
  assert decoders.for_path("/d/a/x.sil") is silent
  np.testing.assert_array_equal(decode.decode_file("/d/a/x.sil", 8000), np.zeros(8000))
  assert store_lib.Store(str(tmp_path), 16000, "HQ").decode_key != before
  with pytest.raises(ValueError, match="both claim"):
    decoders.register(decoders.Decoder("other", 1, (".sil",), silent.decode))
  with pytest.raises(ValueError, match="both claim"):
    decoders.register(decoders.Decoder("default", 1, (), silent.decode))


def test_a_new_decoder_version_is_a_new_cache(monkeypatch, tmp_path):
  """Bumping a decoder's version changes the key: the clips it decoded before are not served."""
  paths = []
  for label, freq in (("a", 440.0), ("b", 1000.0)):
    os.makedirs(tmp_path / "d" / label)
    paths.append(str(tmp_path / "d" / label / "s_nohash_0.flac"))
    sf.write(paths[-1], tone(freq, 0.5, 16000), 16000)
  params = audioclf.Params(data_dir=str(tmp_path / "d"), cache_dir=str(tmp_path / "c"),
                           validation_percent=99.9, testing_percent=0, clip_seconds=0.5)
  first = eval_waveforms(params)
  old = store_lib.Store.for_params(params).root
  decoded = pipeline.PROCESS.decodes.count
  np.testing.assert_array_equal(eval_waveforms(params), first)  # Warm: nothing decoded.
  assert pipeline.PROCESS.decodes.count == decoded
  original = decoders.registered()["libsndfile"].decode
  louder = decoders.Decoder("libsndfile", 2, (),
                            lambda path, rate, quality: 0.5 * original(path, rate, quality))
  monkeypatch.setitem(decoders._REGISTERED, "libsndfile", louder)  # pylint: disable=protected-access
  assert store_lib.Store.for_params(params).root != old
  np.testing.assert_array_equal(eval_waveforms(params), 0.5 * first)  # Decoded again, by v2.
  assert pipeline.PROCESS.decodes.count == decoded + 2
