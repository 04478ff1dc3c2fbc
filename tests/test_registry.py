"""Finding a model by --model (a registered name or module:function) and checking its own arguments."""

import importlib
import os
import sys
import textwrap

import keras_tuner as kt
import numpy as np
import pytest

from audioclf import Params
from audioclf.compat import keras
from audioclf.model import build as models
from audioclf.model import registry
from audioclf.params import ModelArgs, ParamError
from audioclf.tuning.hypermodel import AudioHyperModel

SMALL = Params(sample_rate=8000, clip_seconds=0.5, n_mels=20)
USER_MODULE = '''
import keras

def body(spectrogram, params, *, width: int = 4, rate: float = 0.5, gate: bool = False,
         act: str = "relu"):
  x = keras.layers.Conv2D(width, 3, activation=act)(spectrogram)
  return keras.layers.GlobalAveragePooling2D()(x)

def on_waveform(waveform, params, *, units: int = 8):
  return keras.layers.Dense(units, activation="relu")(waveform)

def whole(*, samples: int = 4000, classes: int = 3):
  audio = keras.Input(shape=(samples,), name="audio")
  return keras.Model(audio, keras.layers.Dense(classes, activation="softmax")(audio))

def not_a_model(x, y, z):
  return x

def search_space(hp):
  return {"width": hp.Choice("width", [2, 6])}
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
  """A module of the user's own, `team_models`, on sys.path (as PYTHONPATH puts it there)."""
  (tmp_path / "team_models.py").write_text(textwrap.dedent(USER_MODULE))
  monkeypatch.syspath_prepend(str(tmp_path))
  yield "team_models"
  sys.modules.pop("team_models", None)


def test_built_in_names_resolve_through_the_entry_points_as_a_users_would():
  assert registry.names()["cnn"] == "audioclf.model.zoo.cnn:cnn"
  model = registry.resolve("ds_cnn")
  assert (model.target, model.kind) == ("audioclf.model.zoo.ds_cnn:ds_cnn", "spectrogram")
  assert model.defaults == {"width": 64, "blocks": 4}
  assert registry.resolve("audioclf.model.zoo.cnn:cnn").function is registry.resolve("cnn").function


def test_a_users_module_function_by_import_path(user_module):
  body = registry.resolve(f"{user_module}:body")
  assert body.kind == "spectrogram" and body.search_space is not None
  assert body.types == {"width": int, "rate": float, "gate": bool, "act": str}
  assert registry.resolve(f"{user_module}:on_waveform").kind == "waveform"
  assert registry.resolve(f"{user_module}:whole").kind == "model"


def test_arguments_are_typed_checked_and_completed(user_module):
  body = registry.resolve(f"{user_module}:body")
  given = Params(model_args="width=8,rate=1,gate=true").model_args
  assert body.arguments(given) == {"width": 8, "rate": 1.0, "gate": True, "act": "relu"}
  assert isinstance(body.arguments(given)["rate"], float)
  assert body.arguments(ModelArgs('{"act": "tanh"}'))["act"] == "tanh"
  with pytest.raises(ParamError, match=r"^--model_args=depth=3: team_models:body takes no "
                                       r"argument 'depth'; it takes width: int = 4, rate"):
    body.arguments(ModelArgs("depth=3"))
  with pytest.raises(ParamError, match=r"^--model_args=width=2.5: width must be int, not float"):
    body.arguments(ModelArgs("width=2.5"))
  with pytest.raises(ParamError, match="gate must be bool, not int"):
    body.arguments(ModelArgs("gate=1"))


@pytest.mark.parametrize("name, match", [
    ("no_such_module:body", r"no module 'no_such_module' in .* add its folder to PYTHONPATH"),
    ("team_models:nothing", r"module team_models \(.*team_models.py\) has no function 'nothing'"),
    ("team_models:not_a_model", r"not_a_model\(x, y, z\) is not a model: a body takes"),
    ("resnet9000", r"no model is registered under that name \(registered: bc_resnet, cnn"),
])
def test_what_is_not_a_model_is_one_line_naming_it(user_module, name, match):
  with pytest.raises(ParamError, match=rf"^--model={name}: {match}"):
    registry.resolve(name)


def test_bodies_get_the_front_end_or_the_waveform_and_the_head(user_module):
  spectrogram = models.build_model(SMALL.replace(model=f"{user_module}:body"), 3)
  assert "log_mel" in [layer.name for layer in spectrogram.layers]
  waveform = models.build_model(SMALL.replace(model=f"{user_module}:on_waveform",
                                              model_args={"units": 5}), 3)
  assert "log_mel" not in [layer.name for layer in waveform.layers]
  assert waveform.get_layer("probabilities").input.shape[-1] == 5
  for model in (spectrogram, waveform):
    assert [t.name for t in model.inputs] == ["waveform"] and model.output_shape == (None, 3)


def test_a_whole_model_is_taken_as_it_is_when_it_fits_the_run(user_module):
  model = models.build_model(SMALL.replace(model=f"{user_module}:whole"), 3)
  waves = np.zeros([2, SMALL.clip_samples], np.float32)
  assert model(models.inputs(waves)).shape == (2, 3)
  with pytest.raises(ParamError, match=r"takes \[4000\] and gives 3 classes; this run has clips "
                                       r"of 4000 samples .* and 5 labels"):
    models.build_model(SMALL.replace(model=f"{user_module}:whole"), 5)


def test_the_tuner_searches_the_models_own_space(user_module, tmp_path):
  hypermodel = AudioHyperModel(SMALL.replace(model=f"{user_module}:body",
                                             model_args={"act": "tanh"}), manifest=None)
  hp = kt.HyperParameters()
  params = hypermodel.trial_params(hp)
  assert hp.values["model_args/width"] == 2
  assert params.model_args == {"act": "tanh", "width": 2}  # The space's draw, beside --model_args.


def test_a_model_dirs_vanished_module_is_one_line_naming_it(user_module, tmp_path):
  from audioclf.model import model_dir as model_dir_lib  # pylint: disable=g-import-not-at-top
  params = SMALL.replace(model=f"{user_module}:body", model_dir=str(tmp_path / "run"))
  model_dir_lib.prepare(params, ["a", "b"])
  os.remove(tmp_path / "team_models.py")
  sys.modules.pop(user_module, None)
  importlib.invalidate_caches()
  with pytest.raises(model_dir_lib.ModelDirError,
                     match=r"holds a model built with --model=team_models:body: no module "
                           r"'team_models' in "):
    model_dir_lib.load_model(params.model_dir)


def test_keras_layers_of_a_users_body_are_plain_keras(user_module):
  model = models.build_model(SMALL.replace(model=f"{user_module}:body"), 3)
  assert any(isinstance(layer, keras.layers.Conv2D) for layer in model.layers)
