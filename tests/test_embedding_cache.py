"""Embed once: the embedding table's key, its checks, its views, the head view, the cache command, and training through it."""

import json
import logging
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import audioclf
from audioclf import Params
from audioclf.data import cache_maintenance
from audioclf.data import manifest as manifest_lib
from audioclf.data import store as store_lib
from audioclf.data.cache_format import data_path, marker_path
from audioclf.embeddings import batches, boundary as boundary_lib, table as table_lib
from audioclf.embeddings import views as views_lib
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.model.speech import shipped
from conftest import write_tone_dataset
from test_your_model import ROOT, _env, last_json
import warm

VIEWS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """(params, manifest): 1 s tones, a frozen speech embedding, views with speed, gain and noise."""
  root = tmp_path_factory.mktemp("embed")
  params = Params(data_dir=write_tone_dataset(root / "data", per_label=6, seconds=1.0),
                  cache_dir=str(root / "cache"), validation_percent=25, testing_percent=25,
                  batch_size=4, model="speech_embedding",
                  model_args={"head": "conv", "width": 8, "trainable": "frozen"},
                  embedding_views=VIEWS, speed_perturb=(0.8, 1.25), gain_db=(-6, 6),
                  noise_prob=0.5, learning_rate=0.01)
  return params, manifest_lib.load(params)


def _model(params, manifest, **args):
  params = params.replace(model_args={**params.model_args, **args})
  return models.compile_model(models.build_model(params, len(manifest.labels)), params)


@pytest.fixture(scope="module")
def built(run):
  """(model, its boundary, the table as the cold pass wrote it)."""
  params, manifest = run
  model = _model(params, manifest)
  boundary = boundary_lib.find(model)
  return model, boundary, table_lib.load_or_embed(params, boundary, manifest)


def test_same_inputs_read_the_table_and_every_input_keys_anew(run, built, monkeypatch):
  params, manifest = run
  model, boundary, cold = built
  assert cold.embedded and cold.values.shape == (len(cold.labels), VIEWS, 16, 1, 96)
  warm_ = table_lib.load_or_embed(params, boundary, manifest)
  assert not warm_.embedded and warm_.base == cold.base
  np.testing.assert_array_equal(warm_.values, cold.values)
  source = table_lib.source_of(params, manifest)
  key = table_lib.key(params, boundary, source)
  assert table_lib.key(params, boundary_lib.find(_model(params, manifest)), source) == key
  others = {table_lib.key(params.replace(**change), boundary, source)
            for change in ({"embedding_views": 2}, {"seed": 1}, {"gain_db": (-3, 3)},
                           {"speed_perturb": (0.9, 1.1)}, {"noise_prob": 0.25})}
  others.add(table_lib.key(params, boundary_lib.find(_model(params, manifest, pad_seconds=0.25)),
                           source))
  changed = _model(params, manifest)
  layer = changed.get_layer("speech_embedding")
  layer.conv0_bias.assign(layer.conv0_bias + 1e-3)
  others.add(table_lib.key(params, boundary_lib.find(changed), source))
  monkeypatch.setattr(shipped, "checksum", lambda: "0" * 64)
  others.add(table_lib.key(params, boundary, source))
  assert len(others) == 8 and key not in others


def test_the_cut_is_where_the_trained_blocks_begin(run):
  params, manifest = run
  source = table_lib.source_of(params, manifest)
  frozen = boundary_lib.find(_model(params, manifest))
  last1 = boundary_lib.find(_model(params, manifest, trainable="last1"))
  assert frozen.shape == (16, 1, 96) and len(last1.shape) == 3 and last1.shape != frozen.shape
  assert table_lib.key(params, last1, source) != table_lib.key(params, frozen, source)
  assert "no pretrained front end" in boundary_lib.find(
      models.build_model(params.replace(model="cnn", model_args={}, clip_seconds=0.5), 3))


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_table_is_embedded_again_never_served(run, built, caplog, damage):
  params, manifest = run
  _, boundary, cold = built
  path = data_path(cold.base)
  with open(path, "r+b") as f:
    if damage == "flip":
      f.seek(1000)
      byte = f.read(1)
      f.seek(1000)
      f.write(bytes([byte[0] ^ 0xFF]))
    else:
      f.truncate(os.path.getsize(path) - 4)
  again = table_lib.load_or_embed(params, boundary, manifest)
  assert again.embedded and again.base == cold.base
  np.testing.assert_array_equal(again.values, cold.values)
  assert sum("is damaged" in r.getMessage() for r in caplog.records) == 1


def _views(params, manifest):
  source = table_lib.source_of(params, manifest)
  return views_lib.Views(params, source.clips, source.labels, num_classes=len(manifest.labels))


def test_views_are_pure_functions_of_seed_row_and_view(run):
  params, manifest = run
  views = _views(params, manifest)
  rows, first = views.batch(1, 0)
  np.testing.assert_array_equal(first, _views(params, manifest).batch(1, 0)[1])
  assert not np.array_equal(first, views.batch(2, 0)[1])
  assert not np.array_equal(first, _views(params.replace(seed=1), manifest).batch(1, 0)[1])
  # View 0 is evaluation's: the centre window, as cut from the cached clips.
  source = table_lib.source_of(params, manifest)
  lengths = source.clips.lengths[rows]
  centre = source.clips.windows(rows, np.maximum(lengths - params.clip_samples, 0) // 2,
                                params.clip_samples)
  np.testing.assert_array_equal(views.batch(0, 0)[1], centre)


def test_cold_and_warm_tables_give_the_same_batches_and_draw_every_view(run, built):
  params, manifest = run
  _, boundary, cold = built
  warm_ = table_lib.load_or_embed(params, boundary, manifest)
  take = lambda table, start: [(x.numpy(), y.numpy()) for x, y in  # noqa: E731
                               batches.dataset(params, table, start).take(12)]
  cold_batches, warm_batches = take(cold, 0), take(warm_, 0)
  for (a, y), (b, z) in zip(cold_batches, warm_batches):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(y, z)
  # A resumed run at batch 5 gets batch 5 on.
  np.testing.assert_array_equal(take(warm_, 5)[0][0], cold_batches[5][0])
  flat = cold.values.reshape(-1, *cold.values.shape[2:])
  drawn = {int(np.flatnonzero((flat == e).all(axis=(1, 2, 3)))[0]) % VIEWS
           for x, _ in cold_batches for e in x}
  assert drawn == set(range(VIEWS))


@pytest.mark.parametrize("trainable", ["frozen", "last2"])
def test_a_head_view_step_trains_the_full_model_and_its_checkpoint(run, tmp_path, trainable):
  params, manifest = run
  model = _model(params, manifest, trainable=trainable)
  boundary = boundary_lib.find(model)
  head = boundary.head_view()
  assert ({id(v) for v in head.trainable_variables} == {id(v) for v in model.trainable_variables}
          and len(head.trainable_variables) == len(model.trainable_variables))
  waves = np.random.default_rng(0).uniform(-0.3, 0.3, (4, params.clip_samples)).astype("float32")
  before = model.predict_on_batch(models.inputs(waves))
  embedded = boundary.front_end.predict_on_batch(models.inputs(waves))
  np.testing.assert_allclose(head.predict_on_batch(embedded), before, atol=1e-5)
  head.compile(optimizer=model.optimizer, loss="sparse_categorical_crossentropy")
  head.train_on_batch(embedded, np.array([0, 1, 2, 0]))
  after = model.predict_on_batch(models.inputs(waves))
  assert np.abs(after - before).max() > 1e-4
  saved = tf.train.Checkpoint(model).save(str(tmp_path / "ckpt"))
  restored = _model(params, manifest, trainable=trainable)
  tf.train.Checkpoint(restored).restore(saved).assert_existing_objects_matched()
  np.testing.assert_allclose(restored.predict_on_batch(models.inputs(waves)), after, atol=1e-6)


def test_cache_info_verify_and_prune_know_the_table(run, built):
  params, manifest = run
  _, boundary, _ = built
  table = table_lib.load_or_embed(params, boundary, manifest)
  store = store_lib.Store.for_params(params)
  listed = cache_maintenance.info(store)["derived_splits"]
  name = os.path.basename(table.base)
  mine = [d for d in listed if d["split"] == name]
  assert mine and mine[0]["kind"] == "embeddings" and mine[0]["views"] == VIEWS
  assert mine[0]["rows"] == len(table.labels) * VIEWS
  source = os.path.join(store.splits_dir, mine[0]["source"])
  assert os.path.exists(marker_path(source))
  report = cache_maintenance.verify(params.cache_dir)
  assert not report["damaged"] and report["splits"] >= 2
  # Unused for no time at all: nothing goes, until its clip split is gone.
  assert os.path.exists(marker_path(table.base))
  cache_maintenance.prune(params.cache_dir, days=1000)
  assert os.path.exists(marker_path(table.base))
  os.remove(marker_path(source))
  pruned = cache_maintenance.prune(params.cache_dir, days=1000)
  assert pruned["removed_files"] >= 4 and not os.path.exists(data_path(table.base))
  assert not cache_maintenance.info(store)["derived_splits"] or all(
      d["split"] != name for d in cache_maintenance.info(store)["derived_splits"])


def _audioclf(*args):
  proc = warm.run([sys.executable, "-m", "audioclf", *args], cwd=ROOT, env=_env(),
                  capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout.strip().splitlines(), proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("engine, trainable", [
    ("keras", "frozen"), ("keras", "last1"),
    pytest.param("estimator", "frozen", marks=pytest.mark.legacy_only)])
def test_train_and_evaluate_through_the_command_line(tmp_path, engine, trainable):
  data = write_tone_dataset(tmp_path / "data", per_label=6, seconds=1.0)
  flags = [f"--data_dir={data}", f"--cache_dir={tmp_path / 'cache'}", "--batch_size=4",
           "--validation_percent=25", "--testing_percent=25", "--model=speech_embedding",
           f"--model_args=trainable={trainable},head=conv,width=8", f"--embedding_views={VIEWS}",
           "--gain_db=-6,6", "--train_steps=8", "--eval_every_steps=4", "--keep_best=val_accuracy",
           f"--engine={engine}", f"--model_dir={tmp_path / 'model'}"]
  out, err = _audioclf("train", *flags)
  trained = last_json(out)
  assert trained["steps"] == 8 and trained["best"]["step"] in (4, 8)
  assert "training the head on new embeddings" in err and "training from audio" not in err
  out, err = _audioclf("train", *flags[:-1], f"--model_dir={tmp_path / 'again'}")
  assert "training the head on cached embeddings" in err
  evaluated = last_json(_audioclf("evaluate", f"--model_dir={tmp_path / 'model'}", "--split=test",
                                  f"--cache_dir={tmp_path / 'cache'}")[0])
  assert 0 <= evaluated["accuracy"] <= 1 and evaluated["files"] > 0
  if engine == "estimator":
    _audioclf("export", f"--model_dir={tmp_path / 'model'}", f"--export_dir={tmp_path / 'export'}")
    assert os.path.exists(tmp_path / "export" / "saved_model.pb")
  info = json.loads(_audioclf("cache", *flags[:2], "--info")[0][-1])
  assert [d["kind"] for d in info["derived_splits"]] == ["embeddings"]


def _checkpoint(model_dir, step=None) -> dict:
  """{key: value} of a model_dir's checkpoint at `step` (None: the latest)."""
  path = (tf.train.latest_checkpoint(model_dir) if step is None
          else os.path.join(model_dir, f"model.ckpt-{step}"))
  reader = tf.train.load_checkpoint(path)
  return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
          if key != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def _weights(values: dict) -> dict:
  return {key: v for key, v in values.items()
          if key.startswith("layer") and ".OPTIMIZER_SLOT" not in key}


@pytest.mark.slow
@pytest.mark.legacy_only
def test_the_estimator_trains_the_head_as_the_keras_engine_and_saves_a_run_from_audio(
    run, tmp_path, caplog):
  params, manifest = run
  # No dropout: the engines' only draw that differs.
  params = params.replace(train_steps=8, eval_every_steps=4, dropout=0.0)

  def train(name, **change):
    changed = params.replace(model_dir=str(tmp_path / name), **change)
    caplog.clear()
    audioclf.train(changed)
    return changed.model_dir, caplog.text

  caplog.set_level(logging.INFO, logger="absl")  # Whatever verbosity parsed flags left it at.
  estimator, log = train("estimator", engine="estimator")
  assert "training the head on" in log and "training from audio" not in log
  keras_dir, _ = train("keras", engine="keras")
  audio, log = train("audio", engine="estimator", embedding_views=0, train_steps=4)
  assert "training the head" not in log
  train("resumed", engine="estimator", train_steps=4)
  resumed, _ = train("resumed", engine="estimator")
  trained = _checkpoint(estimator)
  # The keys and shapes of a run from audio: evaluate, export and migrate read it as one.
  assert ({k: v.shape for k, v in trained.items()}
          == {k: v.shape for k, v in _checkpoint(audio).items()})
  # The same batches from the same first weights: the Keras engine's steps, to float error.
  weights, first = _weights(trained), _weights(_checkpoint(estimator, 0))
  assert max(np.abs(weights[k] - first[k]).max() for k in weights) > 1e-2
  for key, value in _weights(_checkpoint(keras_dir)).items():
    np.testing.assert_allclose(weights[key], value, atol=2e-4, err_msg=key)
  # Resumed at step 4, it continues at batch 4: the same checkpoint as one run of 8 steps.
  for key, value in _checkpoint(resumed).items():
    np.testing.assert_allclose(trained[key], value, rtol=0, atol=1e-6, err_msg=key)
  model, _, labels = model_dir_lib.load_model(estimator, checkpoint="last")
  source = table_lib.source_of(params, manifest)
  waves = source.clips.windows(np.arange(len(source.labels)), np.zeros(len(source.labels), int),
                               params.clip_samples)
  predicted = model.predict_on_batch(models.inputs(waves)).argmax(axis=1)
  assert np.mean(predicted == source.labels) > 0.5  # Of 3 labels: it heard the tones.


def test_word_tails_train_from_audio_not_from_the_cached_views():
  from audioclf.embeddings import fit  # pylint: disable=g-import-not-at-top
  assert fit._why_not(Params(engine="keras"), False) == ""
  assert "--tail_prob" in fit._why_not(Params(engine="keras", tail_prob=0.1), False)
