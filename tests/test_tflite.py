"""TensorFlow Lite export: builtin ops only, float equal to Keras, int8 close to it, the self-check and its CLI."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from audioclf import compat
from audioclf.model import model_dir as model_dir_lib
from audioclf.model import build as models
from audioclf.deploy import tflite
from audioclf.compat import keras
from conftest import ESTIMATOR_ELSE_KERAS, tone
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
  """The keras run's float and int8 TFLite export, with its check."""
  params, _ = trained("keras")
  out = str(tmp_path_factory.mktemp("tflite"))
  return params, tflite.export(params.model_dir, out, quantize=("none", "int8"),
                               calibration_count=40)


@pytest.mark.slow
def test_float_and_int8_agree_with_keras(exported):
  params, result = exported
  model, _, labels = model_dir_lib.load_model(params.model_dir)
  waves = np.stack([tone(f, 0.5, params.sample_rate, seed=i)
                    for i, f in enumerate((300.0, 660.0, 1452.0, 900.0))])
  expected = models.predict_fn(model)(waves)
  runs = {}
  for q in ("none", "int8"):
    content = open(os.path.join(result["export_dir"], tflite.FILE_NAMES[q]), "rb").read()
    runner = tflite.Runner(content)
    runs[q] = runner(waves)
    # Batch 1, as a device runs it, gives the same as the batch.
    np.testing.assert_allclose(runner(waves[:1]), runs[q][:1], atol=1e-6)
  np.testing.assert_allclose(runs["none"], expected, atol=1e-5)
  assert (runs["int8"].argmax(axis=1) == expected.argmax(axis=1)).all()
  np.testing.assert_allclose(runs["int8"], expected, atol=0.1)
  assert [labels[i] for i in runs["int8"].argmax(axis=1)[:3]] == ["low", "mid", "high"]


@pytest.mark.slow
def test_the_check_reports_each_variant(exported):
  params, result = exported
  assert result["split"] == "test"
  assert (result["checkpoint"], result["steps"]) == ("last", params.train_steps)  # No best kept.
  saved = json.load(open(os.path.join(result["export_dir"], "check.json")))
  assert saved == json.loads(json.dumps(result))
  floats, int8 = result["variants"]["none"], result["variants"]["int8"]
  assert floats["agreement"] == 1.0 and floats["max_prob_diff"] < 1e-5
  assert floats["accuracy"] == result["keras_accuracy"]
  assert int8["agreement"] >= 0.9 and int8["max_prob_diff"] < 0.2
  assert int8["bytes"] < floats["bytes"] and int8["size_vs_float"] == pytest.approx(
      int8["bytes"] / floats["bytes"], abs=1e-4)
  assert result["targets"]["float_agreement_100"]
  assert set(result["targets"]) == {"float_agreement_100", "int8_agreement_98",
                                    "int8_accuracy_within_1_point", "int8_size_30_percent"}
  labels = open(os.path.join(result["export_dir"], "labels.txt")).read().split()
  assert labels == ["high", "low", "mid"]
  table = tflite.table(result)
  assert "model_int8.tflite" in table and "targets:" in table


def tensor_kinds(path: str):
  """(an allocated interpreter of the .tflite at `path`, {dtype: its tensors' names})."""
  interpreter = compat.tflite_interpreter(open(path, "rb").read())
  interpreter.allocate_tensors()
  kinds = {}
  for detail in interpreter.get_tensor_details():
    kinds.setdefault(detail["dtype"], []).append(detail["name"])
  return interpreter, kinds


def test_int8_keeps_the_front_end_float_and_the_rest_integer(exported):
  _, result = exported
  interpreter, kinds = tensor_kinds(os.path.join(result["export_dir"], tflite.FILE_NAMES["int8"]))
  assert any("conv" in name.lower() for name in kinds.get(np.int8, []))  # The body is int8...
  assert not any("log_mel" in name for name in kinds.get(np.int8, []))  # ...the front end float.
  assert interpreter.get_input_details()[0]["dtype"] == np.float32
  assert interpreter.get_output_details()[0]["dtype"] == np.float32


def test_banded_mel_equals_the_matrix_product():
  from audioclf.model.features import LogMelSpectrogram
  for sample_rate, fmax in ((16000, 7600.0), (8000, 7600.0), (22050, 11000.0)):
    config = dict(sample_rate=sample_rate, n_mels=40, fmin=20.0, fmax=fmax)
    full, banded = LogMelSpectrogram(**config), tflite.BandedLogMelSpectrogram(**config)
    waves = np.random.default_rng(0).standard_normal((3, sample_rate)).astype(np.float32)
    waves[2] = 0.0  # Silence: the log offset alone.
    expected, got = full(waves).numpy(), banded(waves).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert banded.band_bins.shape[1] < banded.fft_length // 8  # Far fewer than all the bins.


def test_an_op_without_a_kernel_is_named(trained):
  params, _ = trained("keras")
  model, _, _ = model_dir_lib.load_model(params.model_dir)

  class Atan(keras.layers.Layer):
    def call(self, x):
      return tf.math.atan(x)

  bad = keras.Model(model.input, Atan()(model.output))
  with pytest.raises(tflite.UnsupportedOpsError, match="no builtin kernel for Atan"):
    tflite.convert(bad)


def test_int8_needs_calibration_and_quantize_is_checked(trained):
  params, _ = trained("keras")
  model, _, _ = model_dir_lib.load_model(params.model_dir)
  with pytest.raises(ValueError, match="calibration"):
    tflite.convert(model, "int8")
  with pytest.raises(ValueError, match="quantize must be one of"):
    tflite.convert(model, "int4")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ESTIMATOR_ELSE_KERAS)
def test_export_command_line_writes_and_checks_tflite(trained, tmp_path, engine):
  params, _ = trained(engine)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = warm.run([sys.executable, "-m", "audioclf", "export", f"--model_dir={params.model_dir}",
                   "--format=tflite", "--quantize=none", "--quantize=dynamic",
                   f"--export_dir={tmp_path}", "--calibration_clips=16"],
                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  # Quiet: none of TFLite's own lines (the converter's, the interpreter's) at the default verbosity.
  for chatter in ("trackable_obj", "XNNPACK", "fully_quantize", "non-converted ops", "delegate"):
    assert chatter not in proc.stderr, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  assert lines[1].split()[:2] == ["variant", "file"]
  last = json.loads(lines[-1])
  assert set(last["variants"]) == {"none", "dynamic"}
  assert last["variants"]["none"]["agreement"] == 1.0
  assert os.path.isfile(tmp_path / "model_dynamic.tflite")
