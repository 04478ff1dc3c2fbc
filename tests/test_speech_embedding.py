"""The pretrained speech front end: parity with the shipped TFLite files, its checks, freezing and fine-tuning."""

import numpy as np
import pytest
import tensorflow as tf

from audioclf import Params, compat
from audioclf.compat import keras
from audioclf.model import build as models
from audioclf.model.speech import layers as speech
from audioclf.model.speech import shipped
from audioclf.model.zoo import speech_embedding as zoo
from audioclf.params import ParamError

PARAMS = Params(model="speech_embedding", sample_rate=16000, clip_seconds=1.0)


def vowels(seconds: float, seed: int = 0) -> np.ndarray:
  """Speech-like audio: voiced harmonics under moving formants, syllable by syllable, in noise."""
  rng = np.random.default_rng(seed)
  t = np.arange(int(seconds * 16000)) / 16000
  pitch = 110 + 30 * np.sin(2 * np.pi * 0.7 * t)  # A falling and rising voice.
  phase = 2 * np.pi * np.cumsum(pitch) / 16000
  formant = 500 + 1500 * (0.5 + 0.5 * np.sin(2 * np.pi * 2.3 * t))
  voiced = sum(np.sin(k * phase) * np.exp(-((k * pitch - formant) / 400) ** 2)
               for k in range(1, 30))
  syllables = np.clip(np.sin(2 * np.pi * 3.1 * t), 0, None)
  audio = 0.3 * voiced * syllables / np.abs(voiced).max() + 0.003 * rng.standard_normal(t.size)
  return audio.astype(np.float32)


def shipped_model(name, x):
  """What a shipped TFLite file computes on x, run by the stack's own interpreter."""
  with open(shipped.model_file(name), "rb") as f:
    interpreter = compat.tflite_interpreter(f.read())
  interpreter.resize_tensor_input(0, x.shape)
  interpreter.allocate_tensors()
  interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
  interpreter.invoke()
  return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def shipped_embeddings(audio):
  """openWakeWord's arithmetic: the mel file on int16-scaled samples, (x / 10 + 2), the embedding
  file on each 76-frame window, 8 frames apart."""
  mel = shipped_model(shipped.MEL_FILE, audio[None] * np.float32(32768))[0, 0] / 10 + 2
  starts = range(0, len(mel) - speech.WINDOW_FRAMES + 1, speech.EMBEDDING_HOP)
  return np.stack([shipped_model(shipped.EMBEDDING_FILE, mel[None, s:s + 76, :, None])[0, 0, 0]
                   for s in starts])


@pytest.mark.parametrize("audio", [vowels(1.0), vowels(1.6, seed=1),
                                   np.zeros(16000, np.float32)], ids=["1s", "1.6s", "silence"])
def test_embeddings_equal_the_shipped_models(audio):
  ours = speech.SpeechEmbedding()(speech.SpeechMel()(audio[None])).numpy()[0]
  theirs = shipped_embeddings(audio)
  assert ours.shape == theirs.shape == (speech.num_embeddings(speech.num_frames(audio.size)), 96)
  assert np.abs(theirs).max() > 1  # Not a vacuous comparison of zeros.
  np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)


def test_padding_adds_windows_of_silence_around_the_clip():
  audio = vowels(1.0)
  padded = speech.SpeechMel(padding=8000)(audio[None]).numpy()[0]
  assert padded.shape == (speech.num_frames(32000), 32)
  np.testing.assert_array_equal(padded[50:60], speech.SpeechMel()(
      np.pad(audio, 8000)[None]).numpy()[0][50:60])


def test_a_file_other_than_the_pinned_one_is_refused(monkeypatch):
  monkeypatch.setitem(shipped.SHA256, shipped.MEL_FILE, "0" * 64)
  with pytest.raises(ParamError, match=r"melspectrogram.tflite: SHA-256 [0-9a-f]{64}, not the"):
    shipped.model_file(shipped.MEL_FILE)


def test_a_missing_package_names_the_pip_extra(monkeypatch):
  monkeypatch.setattr(shipped.importlib.util, "find_spec", lambda name: None)
  with pytest.raises(ParamError, match=r"^the speech embedding's .* pip install 'audioclf\[speech\]'$"):
    shipped.model_file(shipped.EMBEDDING_FILE)


@pytest.mark.parametrize("trainable, blocks", [("frozen", 0), ("last2", 2), ("all", 5)])
def test_trainable_names_the_blocks_that_train(trainable, blocks):
  model = models.build_model(PARAMS.replace(model_args={"trainable": trainable}), 4)
  layer = model.get_layer("speech_embedding")
  trains = {w.name.split("/")[-1].split("_")[0] for w in layer.trainable_weights}
  first = {0: 20, 2: 11, 5: 0}[blocks]  # The first layer of the blocks that train.
  assert trains == {f"conv{i}" for i in range(first, 20)}
  assert not model.get_layer("speech_mel").trainable_weights


def test_the_learning_rate_multiplier_scales_the_front_ends_steps():
  moved = {}
  for multiplier in (1.0, 0.1):
    keras.utils.set_random_seed(0)
    model = models.build_model(PARAMS.replace(model_args={"trainable": "last1",
                                                          "lr_multiplier": multiplier}), 3)
    layer = model.get_layer("speech_embedding")
    before = (layer.kernels[-1] * layer.scale).numpy()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
    model.train_on_batch(models.inputs(np.stack([vowels(1.0, s) for s in range(4)])),
                         np.array([0, 1, 2, 0]))
    moved[multiplier] = np.abs((layer.kernels[-1] * layer.scale).numpy() - before).max()
  # Adam's first step moves each weight by about the learning rate, whatever its gradient.
  assert moved[1.0] == pytest.approx(1e-3, rel=0.05)
  assert moved[0.1] == pytest.approx(1e-4, rel=0.05)


@pytest.mark.parametrize("args, params, message", [
    ({"trainable": "last9"}, {}, "trainable=last9: speech_embedding takes frozen, all, or last<N>"),
    ({"head": "gru"}, {}, "head=gru: speech_embedding's heads are pooled, conv"),
    ({"head": "conv", "width": 0}, {}, "width=0: the conv head needs a positive width"),
    ({}, {"sample_rate": 8000}, "takes 16 kHz audio, not --sample_rate=8000"),
    ({"pad_seconds": 0.0}, {"clip_seconds": 0.5}, "sees 0.782 s at once"),
])
def test_arguments_that_cannot_work_are_one_line(args, params, message):
  with pytest.raises(ParamError, match=message):
    models.build_model(PARAMS.replace(model_args=args, **params), 3)


def test_search_space_draws_arguments_the_model_takes():
  import keras_tuner  # pylint: disable=import-outside-toplevel
  drawn = zoo.search_space(keras_tuner.HyperParameters())
  model = models.build_model(PARAMS.replace(model_args=drawn), 3)
  assert model.output_shape == (None, 3)


def test_a_checkpoint_restores_every_front_end_weight(tmp_path):
  # Both engines write tf.train.Checkpoint(model): a fine-tuned front end must come back from it.
  params = PARAMS.replace(model_args={"trainable": "last1"})
  model = models.build_model(params, 3)
  for variable in model.get_layer("speech_embedding").weights:
    variable.assign(tf.fill(variable.shape, 0.5))
  path = tf.train.Checkpoint(model).write(str(tmp_path / "ckpt"))
  again = models.build_model(params, 3)
  tf.train.Checkpoint(again).read(path).assert_existing_objects_matched().expect_partial()
  for variable in again.get_layer("speech_embedding").weights:
    np.testing.assert_array_equal(variable.numpy(), 0.5)
