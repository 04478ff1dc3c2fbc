"""The SavedModel export: raw waveforms in, the Keras model's probabilities and label names out."""

import os

import numpy as np
import pytest
import tensorflow as tf

from audioclf.deploy.export import export
from audioclf.model import model_dir as model_dir_lib
from audioclf.model import build as models
from conftest import ENGINES, tone


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_reloaded_savedmodel_equals_the_keras_model(trained, engine, tmp_path):
  params, _ = trained(engine)
  if engine == "keras":
    path = export(params.model_dir)  # The default place.
    assert path == os.path.join(params.model_dir, "export")
  else:
    path = export(params.model_dir, str(tmp_path / "export"))
  model, _, labels = model_dir_lib.load_model(params.model_dir)

  waves = np.stack([tone(f, 0.5, params.sample_rate, seed=i)
                    for i, f in enumerate((300.0, 660.0, 1452.0, 900.0))])
  waves = np.concatenate([waves, np.zeros([1, waves.shape[1]], np.float32)])
  serve = tf.saved_model.load(path).signatures["serving_default"]
  assert serve.structured_input_signature[1]["waveform"].shape.as_list() == [None, 8000]
  out = serve(waveform=tf.constant(waves))

  expected = model.predict(models.inputs(waves), verbose=0)
  np.testing.assert_allclose(out["probabilities"].numpy(), expected, rtol=1e-5, atol=1e-6)
  names = out["label_names"].numpy().astype(str)
  assert names.shape == expected.shape
  assert (names == np.array(labels)).all()
  best = [labels[i] for i in expected.argmax(axis=1)]
  assert list(out["label"].numpy().astype(str)) == best
  # The trained model hears the tones: low, mid, high.
  assert best[:3] == ["low", "mid", "high"]

