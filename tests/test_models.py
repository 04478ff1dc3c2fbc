"""build_model / compile_model: the contract every engine, the tuner and export rely on."""

import numpy as np
import pytest
import tensorflow as tf

import audioclf
from audioclf import Params, compat
from audioclf.compat import keras
from audioclf.model import build as models
from audioclf.model import registry
from audioclf.params import ParamError

PARAMS = Params(sample_rate=8000, clip_seconds=0.5, model_args={"width": 8}, n_mels=20)
# Every built-in model, small: its own arguments at a size that builds in a second.
SMALL = {"cnn": {"width": 8}, "ds_cnn": {"width": 8}, "bc_resnet": {"sub_bands": 1},
         "matchboxnet": {"channels": 8, "blocks": 1, "repeats": 1}, "speech_embedding": {}}
# The pretrained front end takes 16 kHz audio and clips of at least one 0.78 s window.
RATES = {"speech_embedding": {"sample_rate": 16000, "clip_seconds": 1.0}}


def small(name):
  """PARAMS for the built-in model `name` at its small size."""
  return PARAMS.replace(model=name, model_args=SMALL[name], **RATES.get(name, {}))


def test_every_registered_built_in_model_is_tested_here():
  assert set(SMALL) == set(registry.names())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_raw_waveform_in_probabilities_out(name):
  params = small(name)
  model = models.build_model(params, num_classes=5)
  # model_to_estimator maps features by this name; input_fn's features have it too.
  assert [t.name for t in model.inputs] == ["waveform"]
  assert tuple(model.inputs[0].shape) == (None, params.clip_samples)
  assert model.output_shape == (None, 5)
  waves = np.random.default_rng(0).standard_normal([3, params.clip_samples]).astype(
      np.float32) * 0.1
  probs = model(models.inputs(waves), training=False).numpy()
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
  assert (probs >= 0).all()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_model_clones_from_its_config(name):
  # model_to_estimator rebuilds the model in its own graph from get_config.
  model = models.build_model(small(name), num_classes=3)
  clone = keras.models.clone_model(model)
  assert [l.name for l in clone.layers] == [l.name for l in model.layers]
  assert clone.count_params() == model.count_params()


def test_lazy_package_export():
  assert audioclf.build_model is models.build_model


def test_spec_augment_is_optional():
  with_mask = models.build_model(PARAMS, 3)
  without = models.build_model(PARAMS.replace(spec_augment=False), 3)
  # The same layers either way (Keras 3 checkpoints key them by position), but
  # only one of them masks anything while training.
  assert [l.name for l in with_mask.layers] == [l.name for l in without.layers]
  assert with_mask.count_params() == without.count_params()
  log_mel = np.random.default_rng(0).normal(size=(4, 98, PARAMS.n_mels)).astype("float32")
  masked = with_mask.get_layer("spec_augment")(log_mel, training=True)
  kept = without.get_layer("spec_augment")(log_mel, training=True)
  assert not np.array_equal(np.asarray(masked), log_mel)
  np.testing.assert_array_equal(np.asarray(kept), log_mel)


def test_spec_augment_masks_as_the_flags_say():
  def masks(params):
    layer = models.build_model(params, 3).get_layer("spec_augment")
    return layer.freq_masks, layer.max_freq_bins, layer.time_masks, layer.max_time_frames

  frames = 1 + (4000 - 240) // 80  # 0.5 s at 8 kHz, 30 ms frames every 10 ms.
  assert masks(PARAMS) == (2, PARAMS.n_mels // 5, 2, frames // 10)  # Today's recipe.
  assert masks(PARAMS.replace(freq_masks=1, freq_mask_bins=7, time_masks=3,
                              time_mask_frames=12)) == (1, 7, 3, 12)
  assert masks(PARAMS.replace(spec_augment=False, freq_masks=3))[::2] == (0, 0)
  layer = models.build_model(PARAMS.replace(freq_masks=0, time_masks=1, time_mask_frames=5),
                             3).get_layer("spec_augment")
  log_mel = np.random.default_rng(0).normal(size=(16, 48, PARAMS.n_mels)).astype("float32")
  masked = np.asarray(layer(log_mel, training=True)) != log_mel
  assert not masked.all(axis=1).any()  # No whole band masked: no frequency mask.
  widths = masked.all(axis=2).sum(axis=1)  # Frames masked whole, per example.
  assert widths.max() <= 5 and widths.max() > 0


def test_width_scales_the_model():
  def size(width):
    return models.build_model(PARAMS.replace(model="ds_cnn", model_args={"width": width}),
                              3).count_params()
  assert size(16) > 2 * size(8)


def test_unknown_model_lists_the_registry():
  with pytest.raises(ValueError, match=r"--model=resnet9000: no model is registered under that "
                                       r"name \(registered: bc_resnet, cnn, ds_cnn, matchboxnet, "
                                       r"speech_embedding\)"):
    models.build_model(PARAMS.replace(model="resnet9000"), 3)


def test_one_class_is_not_a_classifier():
  with pytest.raises(ValueError, match="two classes"):
    models.build_model(PARAMS, 1)


@pytest.mark.parametrize("name,cls", [("adam", "Adam"), ("sgd", "SGD"), ("rmsprop", "RMSprop")])
def test_compile_picks_optimizer_by_name(name, cls):
  params = PARAMS.replace(optimizer=name, learning_rate=0.01)
  model = models.compile_model(models.build_model(params, 3), params)
  assert type(model.optimizer).__name__ == cls
  assert not compat.is_legacy_optimizer(model.optimizer)
  assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.01)


@pytest.mark.legacy_only
@pytest.mark.parametrize("name,cls", [("adam", "Adam"), ("sgd", "SGD"), ("rmsprop", "RMSprop")])
def test_estimator_gets_the_legacy_optimizer_family(name, cls):
  # The class model_to_estimator needs.
  legacy = models.make_optimizer(PARAMS.replace(optimizer=name, engine="estimator"))
  assert compat.is_legacy_optimizer(legacy)
  assert type(legacy).__name__ == cls


def test_optimizer_args_reach_the_optimizer_and_one_it_does_not_take_is_named():
  params = PARAMS.replace(optimizer="sgd", optimizer_args="momentum=0.9,nesterov=true")
  config = models.make_optimizer(params).get_config()
  assert config["momentum"] == pytest.approx(0.9) and config["nesterov"] is True
  with pytest.raises(ParamError, match=r"^--optimizer_args=betas=1: SGD takes no argument "
                                       r"'betas'; it takes .*momentum"):
    models.make_optimizer(params.replace(optimizer_args={"betas": 1}))


def test_optimizer_model_is_the_builders_own(team_models):
  """A team's whole model, compiled by its builder (SGD, lr 0.01, momentum 0.9), keeps that optimizer."""
  params = Params(sample_rate=16000, clip_seconds=0.25, model=f"{team_models}:raw_conv",
                  optimizer="model").validate()
  model = models.compile_model(models.build_model(params, 4), params)
  whole = model.get_layer("raw_conv")
  assert model.optimizer is whole.optimizer  # One object: both models train alike.
  config = model.optimizer.get_config()
  assert (type(model.optimizer).__name__, config["momentum"]) == ("SGD", pytest.approx(0.9))
  assert float(config["learning_rate"]) == pytest.approx(0.01)
  changed = params.replace(optimizer_args={"momentum": 0.5, "learning_rate": 0.1})
  config = models.compile_model(models.build_model(changed, 4), changed).optimizer.get_config()
  assert (config["momentum"], float(config["learning_rate"])) == (0.5, pytest.approx(0.1))
  with pytest.raises(ParamError, match="--optimizer=model: .* --model=cnn builds no whole model"):
    body = PARAMS.replace(optimizer="model")
    models.compile_model(models.build_model(body, 3), body)
  with pytest.raises(ParamError, match="^--lr_schedule=cosine: --optimizer=model keeps"):
    params.replace(lr_schedule="cosine").validate()


def test_unknown_optimizer_lists_choices():
  with pytest.raises(ValueError, match=r"unknown optimizer 'adagrad'.*'adam'"):
    models.make_optimizer(PARAMS.replace(optimizer="adagrad"))


def test_compiled_model_learns_separable_tones():
  # The whole model, features included, can fit something: loss falls fast.
  t = np.arange(4000) / 8000
  rng = np.random.default_rng(0)
  freqs = np.array([300.0, 1500.0])
  labels = rng.integers(0, 2, 32)
  waves = (0.5 * np.sin(2 * np.pi * freqs[labels, None] * t)
           + 0.05 * rng.standard_normal([32, 4000])).astype(np.float32)
  params = PARAMS.replace(learning_rate=3e-3, spec_augment=False, dropout=0.0)
  keras.utils.set_random_seed(0)
  model = models.compile_model(models.build_model(params, 2), params)
  history = model.fit(models.inputs(waves), labels, batch_size=8, epochs=6, verbose=0)
  assert history.history["loss"][-1] < history.history["loss"][0]
  assert model.evaluate(models.inputs(waves), labels, verbose=0, return_dict=True)["accuracy"] >= 0.9


def test_cosine_schedule_decays_to_zero_at_train_steps():
  params = PARAMS.replace(learning_rate=0.01, lr_schedule="cosine", train_steps=100)
  schedule = models.learning_rate(params)
  assert float(schedule(0)) == pytest.approx(0.01)
  assert float(schedule(50)) == pytest.approx(0.005)
  assert float(schedule(100)) == pytest.approx(0.0, abs=1e-9)
  with pytest.raises(ValueError, match="unknown lr_schedule 'step'"):
    models.make_optimizer(params.replace(lr_schedule="step"))


@pytest.mark.parametrize("scale,center", [(True, True), (False, False)])
def test_batch_norm_trains_as_keras_own_layer(scale, center):
  # compat.BatchNormalization is Keras' layer (Keras 2), or Keras 3's trained
  # through the fused kernel: outputs, gradients and moving statistics must be
  # Keras' own to float rounding, step after step.
  rng = np.random.default_rng(0)
  x = tf.constant(rng.standard_normal((8, 20, 10, 6)).astype(np.float32) * 3 + 1)
  weights = tf.constant(rng.standard_normal((8, 20, 10, 6)).astype(np.float32))
  ours = compat.BatchNormalization(momentum=0.9, scale=scale, center=center)
  theirs = keras.layers.BatchNormalization(momentum=0.9, scale=scale, center=center)
  ours.build(x.shape)
  theirs.build(x.shape)
  theirs.set_weights(ours.get_weights())
  for _ in range(3):
    results = []
    for layer in (ours, theirs):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(tf.sin(y) * weights)
      results.append((y, tape.gradient(loss, [x] + list(layer.trainable_weights))))
    (y_ours, grads_ours), (y_theirs, grads_theirs) = results
    np.testing.assert_allclose(y_ours, y_theirs, atol=1e-5)
    for g_ours, g_theirs in zip(grads_ours, grads_theirs):
      np.testing.assert_allclose(g_ours, g_theirs, rtol=1e-4, atol=1e-4)
  for w_ours, w_theirs in zip(ours.get_weights(), theirs.get_weights()):
    np.testing.assert_allclose(w_ours, w_theirs, rtol=1e-5, atol=1e-5)
  # The moving statistics moved (three steps at momentum 0.9), and inference uses them.
  assert not np.allclose(ours.moving_variance.numpy(), 1.0)
  np.testing.assert_allclose(ours(x, training=False), theirs(x, training=False), atol=1e-5)


def test_models_train_batch_norm_through_compat():
  model = models.build_model(PARAMS, num_classes=3)
  norms = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
  assert norms and all(isinstance(l, compat.BatchNormalization) for l in norms)


def test_a_checkpoint_without_a_models_variable_is_one_line(tmp_path):
  from audioclf.model import model_dir as model_dir_lib  # pylint: disable=g-import-not-at-top
  x = keras.Input([4])
  before = keras.Model(x, keras.layers.Dense(2, name="dense")(x))
  path = tf.train.Checkpoint(before).write(str(tmp_path / "ckpt"))
  y = keras.layers.Dense(2, name="dense")(x)
  after = keras.Model(x, keras.layers.Dense(2, name="added")(y))  # The model's code changed.
  with pytest.raises(model_dir_lib.ModelDirError,
                     match=r"ckpt-?\d* holds no value for .* the model's code changed"):
    model_dir_lib.assert_matched(tf.train.Checkpoint(after).read(path), path)
