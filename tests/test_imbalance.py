"""Imbalance and label noise: the balanced sampler, balanced class weights, label smoothing; both engines."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from sklearn.utils.class_weight import compute_class_weight

import audioclf
from audioclf.compat import keras
from audioclf.data import manifest as manifest_lib
from audioclf.data import sampler as sampler_lib
from audioclf.model import build as models
from audioclf.model import losses
from conftest import ENGINES, write_tone_dataset

LABELS = np.array([0] * 20 + [2] * 5 + [1] * 2 + [2] * 3)  # 20, 2 and 8 rows, interleaved.


def _balanced(shard=None, batch_size=6):
  params = audioclf.Params(batch_size=batch_size, balanced_sampler=True, shuffle_seed=3)
  return sampler_lib.Sampler(params, len(LABELS), shard, labels=LABELS)


def test_every_batch_holds_the_classes_evenly_and_each_class_cycles_through_its_rows():
  sampler = _balanced()
  rows = np.concatenate([sampler.batch(k).numpy() for k in range(40)])
  for batch in rows.reshape(40, 6):
    np.testing.assert_array_equal(np.bincount(LABELS[batch], minlength=3), [2, 2, 2])
  for c in range(3):
    drawn = rows[LABELS[rows] == c]
    size = np.sum(LABELS == c)
    rounds = [sorted(drawn[i:i + size]) for i in range(0, len(drawn) - size + 1, size)]
    # Each round through a class is a permutation of its rows, a new one each time.
    assert all(r == sorted(np.flatnonzero(LABELS == c)) for r in rounds)
    orders = {tuple(drawn[i:i + size]) for i in range(0, len(drawn) - size + 1, size)}
    assert size < 3 or len(orders) > 1
  # One example alone is what its batch gives it: the cold pass meets them one by one.
  for g in (0, 7, 100, 239):
    assert int(sampler.example(g)) == rows[g]


def test_shards_share_each_class_round():
  whole = _balanced(batch_size=3)
  shards = [_balanced((i, 2), batch_size=3) for i in range(2)]
  rows = [np.concatenate([s.batch(k).numpy() for k in range(20)]) for s in shards]
  for c in range(3):
    size = int(np.sum(LABELS == c))
    # Shard i's j-th draw of a class is the class's draw 2j + i of one shared sequence,
    # whose every round is a permutation of the class's rows.
    mine = [r[LABELS[r] == c][:size] for r in rows]
    shared = np.stack(mine, axis=1).reshape(-1)
    for start in (0, size):
      assert sorted(shared[start:start + size]) == sorted(np.flatnonzero(LABELS == c))
  assert not np.array_equal(rows[0], whole.batch(0)[0].numpy())


def test_a_balanced_sampler_needs_labels():
  with pytest.raises(ValueError, match="balanced sampler needs"):
    sampler_lib.Sampler(audioclf.Params(balanced_sampler=True), 10)


def test_input_fn_batches_are_balanced_on_imbalanced_data(tmp_path):
  data = write_tone_dataset(tmp_path / "data", per_label=4)
  extra = write_tone_dataset(tmp_path / "more", labels=("low",), per_label=20,
                             freqs={"low": 300.0})
  for name in os.listdir(os.path.join(extra, "low")):
    os.rename(os.path.join(extra, "low", name), os.path.join(data, "low", "x" + name))
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=6,
                           validation_percent=0, testing_percent=0, balanced_sampler=True)
  counts = manifest_lib.load(params).label_counts("train")
  assert max(counts) >= 4 * min(counts)
  for _, labels in audioclf.input_fn(params, "train").take(8):
    np.testing.assert_array_equal(np.bincount(labels.numpy(), minlength=3), [2, 2, 2])


def test_balanced_weights_are_scikit_learns():
  counts = [30, 0, 5, 15]
  y = np.repeat(np.arange(4), counts)
  present = np.unique(y)
  want = np.ones(4)
  want[present] = compute_class_weight("balanced", classes=present, y=y)
  np.testing.assert_allclose(losses.balanced_weights(counts), want)


def _probabilities(rows=6, classes=3, seed=0):
  logits = np.random.default_rng(seed).normal(size=(rows, classes))
  return tf.constant(np.exp(logits) / np.exp(logits).sum(1, keepdims=True), tf.float32)


def test_the_loss_takes_ids_or_soft_labels_smoothing_and_weights():
  p, ids = _probabilities(), tf.constant([0, 1, 2, 2, 1, 0])
  sparse = keras.losses.SparseCategoricalCrossentropy()(ids, p)
  np.testing.assert_allclose(losses.ClassifierLoss()(ids, p), sparse, rtol=1e-5)
  np.testing.assert_allclose(losses.ClassifierLoss()(tf.one_hot(ids, 3), p), sparse, rtol=1e-5)
  smoothed = keras.losses.CategoricalCrossentropy(label_smoothing=0.1)(tf.one_hot(ids, 3), p)
  np.testing.assert_allclose(losses.ClassifierLoss(0.1)(ids, p), smoothed, rtol=1e-5)
  weights = np.array([1.0, 2.0, 0.5])
  per_example = -np.log(p.numpy()[np.arange(6), ids.numpy()])
  np.testing.assert_allclose(losses.ClassifierLoss(class_weights=weights)(ids, p),
                             np.mean(per_example * weights[ids.numpy()]), rtol=1e-5)
  soft = tf.constant([[0.7, 0.3, 0.0]] * 6)
  np.testing.assert_allclose(losses.ClassifierLoss(class_weights=weights)(soft, p), np.mean(
      -(soft.numpy() * np.log(p.numpy())).sum(1) * (soft.numpy() @ weights)), rtol=1e-5)


def test_accuracy_takes_ids_or_soft_labels():
  p = _probabilities()
  ids = tf.argmax(p, axis=1)
  wrong = (ids + 1) % 3
  metric = losses.Accuracy()
  metric.update_state(ids, p)
  metric.update_state(tf.one_hot(wrong, 3) * 0.6 + tf.one_hot(ids, 3) * 0.4, p)
  assert float(metric.result()) == pytest.approx(0.5)
  assert type(metric).from_config(metric.get_config()).name == "accuracy"


def test_compile_keeps_keras_own_loss_unless_asked():
  params = audioclf.Params(sample_rate=8000, clip_seconds=0.5, model_args={"width": 8}, n_mels=20)
  plain = models.compile_model(models.build_model(params, 3), params, class_counts=[5, 5, 1])
  assert isinstance(plain.loss, keras.losses.SparseCategoricalCrossentropy)
  weighted = params.replace(class_weights="balanced", label_smoothing=0.1)
  model = models.compile_model(models.build_model(weighted, 3), weighted, class_counts=[5, 5, 1])
  assert isinstance(model.loss, losses.ClassifierLoss)
  assert model.loss.label_smoothing == 0.1
  np.testing.assert_allclose(model.loss.class_weights, [11 / 15, 11 / 15, 11 / 3])
  evaluating = models.compile_model(models.build_model(weighted, 3), weighted)
  assert evaluating.loss.class_weights is None  # Weights are training's business.


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_both_engines_train_with_every_augmentation_and_soft_labels(tone_params, tmp_path, engine):
  params = tone_params.replace(
      engine=engine, model_dir=str(tmp_path / "model"), train_steps=4, eval_every_steps=0,
      log_every_steps=0, noise_prob=0.5, speed_perturb=(0.9, 1.1), pitch_shift_semitones=(-1, 1),
      tempo_perturb=(0.9, 1.1), reverb_prob=0.5, gain_db=(-3, 3), mixup_alpha=0.4,
      balanced_sampler=True, class_weights="balanced", label_smoothing=0.1, freq_mask_bins=4)
  metrics = audioclf.train(params)
  assert metrics["steps"] == 4
  assert np.isfinite([metrics["val_loss"], metrics["val_accuracy"], metrics["test_loss"]]).all()
  with open(os.path.join(params.model_dir, "params.json")) as f:
    assert json.load(f)["mixup_alpha"] == 0.4


def test_an_order_is_traced_once_per_process_whatever_builds_it():
  # Each input_fn makes a sampler; its batches' function is the one traced before (build time).
  from audioclf.data import order as order_lib  # pylint: disable=g-import-not-at-top
  made = [_balanced() for _ in range(2)]
  assert made[0].order == made[1].order and made[0] is not made[1]
  assert order_lib.traced_batches(made[0].order) is order_lib.traced_batches(made[1].order)
  other = _balanced(batch_size=4)
  assert order_lib.traced_batches(other.order) is not order_lib.traced_batches(made[0].order)
