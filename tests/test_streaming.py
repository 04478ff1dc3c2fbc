"""The streaming form of a speech_embedding model: hop by hop, it equals the clip model on each window."""

import numpy as np
import pytest

from audioclf import Params
from audioclf.model import build as models
from audioclf.params import ParamError
from audioclf.streaming import model as streaming
from test_speech_embedding import vowels

LABELS = ["_silence_", "_unknown_", "yes", "no"]


def clip_model(pad_seconds: float, clip_seconds: float, seed: int = 0):
  """A speech_embedding classifier with a conv head whose weights are drawn at random, not trained."""
  params = Params(model="speech_embedding", sample_rate=16000, clip_seconds=clip_seconds,
                  model_args={"head": "conv", "width": 16, "pad_seconds": pad_seconds})
  model = models.build_model(params, len(LABELS))
  rng = np.random.default_rng(seed)
  for name in ("head_norm", "head_conv", "probabilities"):
    layer = model.get_layer(name)
    layer.set_weights([rng.normal(1 if i == 0 and name == "head_norm" else 0, 0.1, w.shape)
                       .astype(np.float32) for i, w in enumerate(layer.get_weights())])
  return model


@pytest.fixture(scope="module")
def stream_and_clip():
  trained = clip_model(pad_seconds=0.5, clip_seconds=1.0)
  # The same weights on the window the stream's head sees, with no padding.
  window = clip_model(pad_seconds=0.0, clip_seconds=2.0)
  window.set_weights(trained.get_weights())
  return streaming.StreamingModel(trained, LABELS), window


def test_each_hop_equals_the_clip_model_on_its_window(stream_and_clip):
  stream, window_model = stream_and_clip
  assert stream.window_samples == 32000 and stream.window_embeddings == 16
  # Speech-like audio over noise 40 dB down: SpeechMel's floor (80 dB under the peak) never binds.
  audio = np.concatenate([vowels(2.0, seed=1), vowels(2.0, seed=2)[::-1].copy()])
  hops = audio.size // streaming.HOP_SAMPLES - 1
  stream.reset()
  ours, windows = [], []
  for k in range(hops):
    probabilities = stream.step(audio[None, k * streaming.HOP_SAMPLES:(k + 1) * streaming.HOP_SAMPLES])
    start, end = stream.window(k)
    if k >= stream.warmup_hops:
      assert 0 <= start and end == (k + 1) * streaming.HOP_SAMPLES
      ours.append(probabilities.numpy()[0])
      # The clip model's last few samples fall after the hop: they set only its peak.
      windows.append(audio[start:start + stream.window_samples])
  assert len(ours) >= 20
  theirs = np.asarray(window_model(models.inputs(np.stack(windows)), training=False))
  assert np.ptp(theirs, axis=0).max() > 0.05  # The hops differ: not a comparison of constants.
  np.testing.assert_allclose(np.stack(ours), theirs, atol=1e-5, rtol=0)


def test_reset_starts_the_stream_again(stream_and_clip):
  stream, _ = stream_and_clip
  audio = vowels(1.0, seed=3)[:streaming.HOP_SAMPLES * 4].reshape(4, 1, -1)
  stream.reset()
  first = [stream.step(hop).numpy() for hop in audio]
  stream.reset()
  np.testing.assert_array_equal(first, [stream.step(hop).numpy() for hop in audio])


def test_an_embedding_lags_by_the_convolutions_reach_into_the_past():
  kernels = [3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 3]
  # 76 frames seen: 1, plus 68 read back by the convs, plus 1 + 2 + 4 by the pools.
  assert streaming.lag_frames(kernels) == 68
  with pytest.raises(ValueError, match="pools 4 frames in time, not 8"):
    streaming.lag_frames(kernels, pools={2: (2, 2), 10: (2, 2)})


def test_only_speech_embedding_streams(tmp_path):
  (tmp_path / "params.json").write_text(Params(model="cnn").to_json())
  with pytest.raises(ParamError, match=r"only --model=speech_embedding streams, not --model=cnn"):
    streaming.StreamingModel.from_model_dir(str(tmp_path))


@pytest.mark.slow  # Three conversions to TFLite.
def test_the_tflite_form_runs_hop_by_hop_as_the_streaming_model(stream_and_clip):
  from audioclf.streaming import tflite
  stream, _ = stream_and_clip
  hops = tflite.check_audio(40, seed=1)
  stream.reset()
  expected = np.stack([stream.step(hop[None]).numpy()[0] for hop in hops])
  stream.step(hops[:1])  # Converting must start from a fresh stream whatever the state.
  content = tflite.convert(stream, "none")
  np.testing.assert_allclose(tflite.run_hops(content, hops), expected, atol=1e-5, rtol=0)
  assert np.ptp(expected, axis=0).max() > 0.05
  assert len(tflite.convert(stream, "dynamic")) < len(content) / 2
  with pytest.raises(ParamError, match=r"^--quantize=int8 calibrates on the training clips"):
    tflite.convert(stream, "int8")
  with pytest.raises(ParamError, match=r"takes --quantize=none, dynamic, int8, not float16$"):
    tflite.convert(stream, "float16")
  int8 = tflite.convert(stream, "int8", calibration=hops[:20])
  assert len(int8) < len(content) / 2
  got = tflite.run_hops(int8, hops)
  assert np.all(np.isfinite(got)) and np.abs(got - expected).max() < 0.5


def noisy_hops(seconds: float, seed: int) -> np.ndarray:
  """Hops of speech-like syllables every 3 s in white noise at -26 dBFS, each at 0-20 dB SNR."""
  from audioclf.streaming import quality
  noise = 0.05 * np.random.default_rng(seed).standard_normal(int(seconds * 16000), np.float32)
  clips = [(vowels(1.0, seed=100 * seed + i), "") for i in range(int(seconds // 3) - 1)]
  audio, _ = quality.place_keywords(noise, clips, 3.0, 16000, (0.0, 20.0), seed)
  return audio[:audio.size // streaming.HOP_SAMPLES * streaming.HOP_SAMPLES].reshape(
      -1, streaming.HOP_SAMPLES)


@pytest.mark.slow  # A conversion to TFLite.
def test_int8_follows_float_hop_by_hop_on_a_noisy_stream(stream_and_clip):
  # Quantized, the first layer turns the log-mel's level into an error that the layers after it
  # carry to the output: this model moved by up to 0.09 (mean 0.013); kept float, by up to 0.04
  # (mean 0.007).
  from audioclf.streaming import tflite
  stream, _ = stream_and_clip
  hops = noisy_hops(40.0, seed=1)
  stream.reset()
  expected = np.stack([stream.step(hop[None]).numpy()[0] for hop in hops])
  got = tflite.run_hops(tflite.convert(stream, "int8", calibration=noisy_hops(60.0, seed=0)), hops)
  diff = np.abs(got - expected)[stream.warmup_hops:]
  assert np.ptp(expected, axis=0).max() > 0.1  # The hops differ: not a comparison of constants.
  assert diff.max() < 0.06 and diff.mean() < 0.01, (diff.max(), diff.mean())


def test_int8_calibrates_on_the_training_clips_in_the_training_noise(stream_and_clip, tmp_path):
  import soundfile as sf
  from audioclf.streaming import background, tflite
  from conftest import write_tone_dataset
  stream, _ = stream_and_clip
  data = tmp_path / "data"
  write_tone_dataset(data, labels=("low", "high"), per_label=6, seconds=1.0)
  (tmp_path / "model").mkdir()
  (tmp_path / "model" / "params.json").write_text(Params(data_dir=str(data)).to_json())
  quiet = tflite.calibration_hops(stream, str(tmp_path / "model"), 3)
  assert len(quiet) == 3 * 16000 // streaming.HOP_SAMPLES  # No noise: the clips end to end.
  (data / "_background_noise_").mkdir()
  noise = 0.05 * np.random.default_rng(0).standard_normal(16000 * 7)
  sf.write(data / "_background_noise_" / "hiss.wav", noise, 16000)
  hops = tflite.calibration_hops(stream, str(tmp_path / "model"), 3)
  # Each clip a spacing after the last, the noise looped under all of them.
  assert len(hops) == int(4 * background.spacing_seconds(stream) * 16000) // streaming.HOP_SAMPLES
  assert np.sqrt(np.mean(np.square(hops), axis=1)).min() > 0.04
  np.testing.assert_allclose(hops[1], noise[1280:2560], atol=1 / 16384)  # Before the first clip.


def test_the_fast_step_is_the_step(stream_and_clip):
  stream, _ = stream_and_clip
  hops = vowels(2.0, seed=5)[:streaming.HOP_SAMPLES * 20].reshape(20, 1, -1)
  stream.reset()
  plain = [stream.step(hop).numpy() for hop in hops]
  stream.reset()
  np.testing.assert_allclose([stream.fast_step(hop).numpy() for hop in hops], plain, atol=1e-5)


@pytest.mark.slow  # A conversion to TFLite.
def test_dynamic_range_keeps_the_mel_filters_in_float(stream_and_clip):
  # As a matrix product, the mel filters' input (a power spectrum 100 dB wide) is
  # quantized to 8 bits on the fly and the quiet bands vanish; as the banded
  # gather and sum that the streaming step uses, it stays float.
  from audioclf.streaming import tflite
  stream, _ = stream_and_clip
  audio = vowels(4.0, seed=7)
  hops = audio[:audio.size // streaming.HOP_SAMPLES * streaming.HOP_SAMPLES].reshape(
      -1, streaming.HOP_SAMPLES)
  stream.reset()
  expected = np.stack([stream.step(hop[None]).numpy()[0] for hop in hops])
  got = tflite.run_hops(tflite.convert(stream, "dynamic"), hops)
  # int8 weights alone move this model's probabilities by about 0.01; the
  # quantized spectrum moved them by 0.1.
  assert np.abs(got - expected)[stream.warmup_hops:].max() < 0.03


def test_the_floor_on_digital_silence_is_80_db_under_the_loudest_frame_still_in_the_window(
    stream_and_clip):
  # Where the floor binds, the stream and a clip differ: a clip's floor is its
  # own peak's; the stream's, the peak of the window's frames heard so far.
  stream, _ = stream_and_clip
  loud = vowels(1.0, seed=8)[:streaming.HOP_SAMPLES][None]
  silence = np.zeros((1, streaming.HOP_SAMPLES), np.float32)
  stream.reset()
  # A stream that starts in digital silence: log of the 1e-10 guard, -100 dB.
  np.testing.assert_allclose(stream._mel_frames(silence), -100.0 / 10 + 2, atol=1e-5)
  frames = stream._mel_frames(loud).numpy()
  peak = float(stream._state["peaks"].numpy().max())
  assert peak > 60  # Vowels at the int16 scale.
  assert frames.min() >= (peak - 80) / 10 + 2 - 1e-5
  # Silence after it is floored 80 dB under that peak while its frames stay in the window...
  # (the first hop after it still frames some of its samples, and may hold the peak).
  stream._mel_frames(silence)
  peak = float(stream._state["peaks"].numpy().max())
  hops_in_window = stream.window_frames // 8
  for _ in range(hops_in_window - 2):
    np.testing.assert_allclose(stream._mel_frames(silence), (peak - 80) / 10 + 2, atol=1e-4)
  # ...and falls back to the guard once they have left it.
  for _ in range(hops_in_window):
    last = stream._mel_frames(silence)
  np.testing.assert_allclose(last, -100.0 / 10 + 2, atol=1e-5)
  stream.reset()


@pytest.mark.slow  # A conversion to TFLite.
def test_the_clip_export_bands_speech_mel_too(stream_and_clip):
  # The clip model's dynamic variant (audioclf export --format=tflite) keeps SpeechMel's
  # filters float as the streaming step does: BandedSpeechMel, the same outputs.
  from audioclf.deploy import tflite as clip_tflite
  _, window = stream_and_clip
  audio = np.stack([vowels(2.0, seed=s)[:window.inputs[0].shape[1]] for s in (3, 4)])
  banded = clip_tflite.on_device(window)
  assert isinstance(banded.get_layer("speech_mel"), clip_tflite.BandedSpeechMel)
  expected = window(audio).numpy()
  np.testing.assert_allclose(banded(audio).numpy(), expected, atol=1e-5)
  got = clip_tflite.Runner(clip_tflite.convert(window, "dynamic"))(audio)
  assert np.abs(got - expected).max() < 0.03
