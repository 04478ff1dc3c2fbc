"""The model zoo's bodies: shapes, published sizes, training, builtin-only TFLite (float, int8)."""

import functools
import inspect

import keras_tuner
import numpy as np
import pytest
import tensorflow as tf

from audioclf import Params, compat
from audioclf.compat import keras
from audioclf.deploy import tflite as tflite_lib
from audioclf.model import cost
from audioclf.model.zoo import bc_resnet, matchboxnet

PARAMS = Params(n_mels=40)
FRAMES = 16  # Few frames keep each test fast; every body pools time away.
BODIES = {"bc_resnet": bc_resnet.bc_resnet, "matchboxnet": matchboxnet.matchboxnet}
MODULES = {"bc_resnet": bc_resnet, "matchboxnet": matchboxnet}
FEATURES = {"bc_resnet": 32, "matchboxnet": 128}  # Pooled widths at the default arguments.


def wrap(body, frames=FRAMES, n_mels=40, classes=3, **model_args):
  """The body between a log-mel input and a Dropout + Dense softmax head, as in build_model."""
  spectrogram = keras.Input([frames, n_mels, 1], name="log_mel")
  features = body(spectrogram, PARAMS.replace(n_mels=n_mels), **model_args)
  x = keras.layers.Dropout(0.1, name="dropout")(features)
  probabilities = keras.layers.Dense(classes, activation="softmax", name="probabilities")(x)
  return keras.Model(spectrogram, probabilities)


@functools.lru_cache(maxsize=None)
def built(name):
  """wrap(BODIES[name]) at the defaults, built once for the tests that only read it."""
  return wrap(BODIES[name])


def separable_data(n=48, frames=FRAMES, n_mels=40, classes=3, seed=0):
  """Noise with a loud third of the mel bands, which third by class: trivially separable."""
  rng = np.random.default_rng(seed)
  y = np.arange(n) % classes
  x = rng.normal(size=(n, frames, n_mels, 1)).astype(np.float32)
  band = n_mels // classes
  for i, label in enumerate(y):
    x[i, :, label * band:(label + 1) * band] += 3.0
  return x, y


@pytest.fixture(scope="module")
def trained():
  """trained(name) -> (model, x, y, losses): the wrapped body after 60 Adam steps, once each.

  60 steps, not 3: BN's moving statistics (momentum 0.9) keep 0.9**steps of
  their initial values, and the TFLite checks want an inference-mode model
  that tells the classes apart. Tracing the train step is most of the time.
  """
  runs = {}

  def get(name):
    if name not in runs:
      keras.utils.set_random_seed(0)
      model = wrap(BODIES[name])
      x, y = separable_data()
      epochs, batch_size = 20, 16
      schedule = keras.optimizers.schedules.CosineDecay(1e-2, epochs * len(x) // batch_size)
      model.compile(optimizer=keras.optimizers.Adam(schedule),
                    loss=keras.losses.SparseCategoricalCrossentropy())
      compat.build_optimizer(model)  # As keras_loop.fit does: the step traced once.
      history = model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
      runs[name] = model, x, y, history.history["loss"]
    return runs[name]

  return get


def test_macs_counts_each_kernel_weight_once_per_output_position():
  x = keras.Input([6, 5, 2])
  conv = keras.layers.Conv2D(4, 3, strides=(2, 1), padding="same")(x)  # 3x5 outputs
  depthwise = keras.layers.DepthwiseConv2D(3, padding="same")(conv)  # 3x5 outputs
  separable = keras.layers.SeparableConv2D(8, (3, 1), padding="same")(depthwise)
  dense = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(separable))
  expected = 15 * (9 * 2 * 4) + 15 * (9 * 4) + 15 * (3 * 4 + 4 * 8) + 8 * 3
  assert cost.macs(keras.Model(x, dense)) == expected


@pytest.mark.parametrize("name", sorted(BODIES))
def test_body_pools_to_features(name):
  model = wrap(BODIES[name], classes=5)
  features = model.get_layer("dropout").input  # The body's output.
  assert tuple(features.shape) == (None, FEATURES[name])
  probs = np.asarray(model(separable_data(n=3)[0], training=False))
  assert probs.shape == (3, 5)
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_model_args_are_typed_keywords_with_defaults(name):
  # --model_args=key=value is parsed by these annotations.
  arguments = list(inspect.signature(BODIES[name]).parameters.values())[2:]
  assert arguments and all(a.kind is a.KEYWORD_ONLY for a in arguments)
  assert all(a.annotation is not a.empty and a.default is not a.empty for a in arguments)


def test_bc_resnet_has_the_published_sizes():
  # Kim et al. 2021, Table 3: BC-ResNet-1 9.2k and BC-ResNet-8 321k parameters
  # (40 mels, 12 classes), and 3.1M and 89.1M multiplies; counting conv and
  # dense layers alone leaves out the per-element normalization the paper's
  # count seems to hold (most of 0.6M at scale 1).
  one = wrap(bc_resnet.bc_resnet, frames=101, classes=12)
  eight = wrap(bc_resnet.bc_resnet, frames=101, classes=12, scale=8)
  assert cost.parameters(one) == 9_232  # The authors' code's count, to the weight.
  assert round(cost.parameters(eight), -3) == 321_000
  assert 2.3e6 < cost.macs(one) < 3.1e6
  assert 83e6 < cost.macs(eight) < 89.1e6


def test_matchboxnet_has_the_published_size():
  # 3x2x64 on the paper's 64 MFCCs of 128 frames, 35 classes: 93k parameters;
  # Kim et al. 2021 list 11.3M multiplies for it.
  model = wrap(matchboxnet.matchboxnet, frames=128, n_mels=64, classes=35)
  assert round(cost.parameters(model), -3) == 93_000
  assert 10.8e6 < cost.macs(model) < 11.3e6


def test_scale_widens_bc_resnet():
  one = cost.parameters(built("bc_resnet"))
  two = cost.parameters(wrap(bc_resnet.bc_resnet, scale=2))
  # Most weights are 1x1 convs, which grow with the square of the width.
  assert 2.5 * one < two < 4 * one


def test_matchboxnet_args_grow_it():
  size = lambda **args: cost.parameters(wrap(matchboxnet.matchboxnet, **args))  # noqa: E731
  base = size()
  assert size(channels=128) > 3 * base
  assert base < size(blocks=6) < 2 * base
  assert size(repeats=1) < base < size(repeats=3)


@pytest.mark.slow
def test_sub_bands_must_divide_the_bands():
  # 64 mels leave 32 bands after the stem: five sub-bands do not fit.
  with pytest.raises(ValueError, match="sub_bands=5 must divide"):
    wrap(bc_resnet.bc_resnet, n_mels=64)
  assert wrap(bc_resnet.bc_resnet, n_mels=64, sub_bands=4).output_shape == (None, 3)
  # One sub-band is plain BatchNorm: 2 weights per channel instead of 10.
  assert cost.parameters(wrap(bc_resnet.bc_resnet, sub_bands=1)) < cost.parameters(
      built("bc_resnet"))


@pytest.mark.parametrize("name", sorted(BODIES))
def test_search_space_builds(name):
  hp = keras_tuner.HyperParameters()
  model_args = MODULES[name].search_space(hp)
  assert set(model_args) == set(hp.values)
  assert set(model_args) <= set(inspect.signature(BODIES[name]).parameters)
  assert wrap(BODIES[name], **model_args).output_shape == (None, 3)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_model_clones_from_its_config(name):
  # model_to_estimator and the TFLite export rebuild the model from get_config.
  model = built(name)
  clone = keras.models.clone_model(model)
  clone.set_weights(model.get_weights())
  x = separable_data(n=2)[0]
  np.testing.assert_allclose(clone(x, training=False), model(x, training=False), atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BODIES))
def test_training_lowers_the_loss(name, trained):
  model, x, y, losses = trained(name)
  assert losses[3] < 0.5 * losses[0] and losses[-1] < 0.1 * losses[0]
  # Inference mode (BN's moving statistics) tells the classes apart too (called, not
  # model.predict: that traces a function of its own for one batch).
  assert (np.asarray(model(x, training=False)).argmax(axis=1) == y).mean() > 0.9


def to_tflite(model, calibration=None) -> bytes:
  """`model` as TFLite with builtin ops only: float, or int8 calibrated on `calibration`."""
  converter = tflite_lib.converter_of(model)
  if calibration is not None:
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([example[np.newaxis]] for example in calibration)
    # Every op between the float input and output must have an int8 kernel.
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
  return converter.convert()


def run_tflite(content: bytes, x: np.ndarray) -> np.ndarray:
  """The .tflite model's output for the batch `x`."""
  interpreter = compat.tflite_interpreter(content)
  index_in = interpreter.get_input_details()[0]["index"]
  index_out = interpreter.get_output_details()[0]["index"]
  interpreter.resize_tensor_input(index_in, x.shape)
  interpreter.allocate_tensors()
  interpreter.set_tensor(index_in, x)
  interpreter.invoke()
  return interpreter.get_tensor(index_out).copy()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Statistics for quantized inputs")  # The float input's.
@pytest.mark.parametrize("name", sorted(BODIES))
def test_tflite_float_and_int8_match_keras(name, trained):
  model, x, _, _ = trained(name)
  fresh = separable_data(n=24, seed=1)[0]
  expected = np.asarray(model(fresh, training=False))
  floats = to_tflite(model)
  np.testing.assert_allclose(run_tflite(floats, fresh), expected, atol=1e-4)
  int8 = to_tflite(model, calibration=x)
  got = run_tflite(int8, fresh)
  assert (got.argmax(axis=1) == expected.argmax(axis=1)).mean() >= 0.9
  kinds = {d["dtype"] for d in compat.tflite_interpreter(int8).get_tensor_details()
           if "conv" in d["name"].lower()}
  assert np.int8 in kinds  # The convolutions run in int8.
