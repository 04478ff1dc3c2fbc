"""input_fn: its contract (spec, modes, order), graph mode, and the augmentations after the cache."""

import numpy as np
import pytest
import tensorflow as tf

import audioclf
from audioclf import pipeline
from conftest import write_tone_dataset


@pytest.fixture
def params(tmp_path):
  data = write_tone_dataset(tmp_path / "data", per_label=8)
  return audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=4,
                         validation_percent=25, testing_percent=0)


def test_element_spec_is_as_documented(params):
  train = audioclf.input_fn(params, "train")
  assert isinstance(train, tf.data.Dataset)
  assert train.element_spec == (
      {"waveform": tf.TensorSpec([4, 16000], tf.float32)}, tf.TensorSpec([4], tf.int32))
  for mode in ("eval", "infer"):
    assert audioclf.input_fn(params, mode).element_spec == (
        {"waveform": tf.TensorSpec([None, 16000], tf.float32)}, tf.TensorSpec([None], tf.int32))


def test_eval_reads_each_example_once_in_a_fixed_order(params):
  n = len(audioclf.manifest.load(params).split("validation"))
  runs = [[(f["waveform"].numpy(), y.numpy()) for f, y in audioclf.input_fn(params, "eval")]
          for _ in range(2)]
  assert sum(len(y) for _, y in runs[0]) == n
  for (wa, ya), (wb, yb) in zip(*runs):
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ya, yb)


def test_train_shuffles_anew_each_epoch_and_covers_every_file(params):
  params = params.replace(time_shift_seconds=0.0, clip_seconds=0.5)
  n = len(audioclf.manifest.load(params).split("train"))
  params = params.replace(batch_size=n)  # A batch is an epoch.
  batches = [f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "train").take(3)]
  epochs = np.concatenate(batches).reshape(3, n, -1)
  keys = [[row.tobytes() for row in epoch] for epoch in epochs]
  assert all(len(set(k)) == n for k in keys)  # Every file once per epoch...
  assert sorted(keys[0]) == sorted(keys[1]) == sorted(keys[2])
  assert keys[0] != keys[1] != keys[2]  # ...in a new order each time.
  warm = [f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "train").take(3)]
  np.testing.assert_array_equal(np.concatenate(warm), np.concatenate(batches))  # Cache-blind.


def test_cold_and_warm_training_batches_agree_across_epoch_boundaries(params):
  """Batches run on across epochs: the cold pass completes epoch 1's last batch from epoch 2."""
  params = params.replace(time_shift_seconds=0.0, clip_seconds=0.5)
  n = len(audioclf.manifest.load(params).split("train"))
  params = params.replace(batch_size=5)
  assert n % 5  # The last batch of every epoch straddles two epochs.
  steps = 3 * n // 5
  cold = [(f["waveform"].numpy(), y.numpy()) for f, y in audioclf.input_fn(params, "train").take(steps)]
  warm = [(f["waveform"].numpy(), y.numpy()) for f, y in audioclf.input_fn(params, "train").take(steps)]
  for (wc, yc), (ww, yw) in zip(cold, warm):
    np.testing.assert_array_equal(wc, ww)
    np.testing.assert_array_equal(yc, yw)
  waves = np.concatenate([w for w, _ in cold])
  for epoch in range(2):  # Every file once per epoch, whatever the batch boundaries.
    keys = {row.tobytes() for row in waves[epoch * n:(epoch + 1) * n]}
    assert len(keys) == n


def test_labels_match_their_folders(params):
  labels = audioclf.manifest.load(params).labels
  for f, y in audioclf.input_fn(params, "eval"):
    for wave, label in zip(f["waveform"].numpy(), y.numpy()):
      spectrum = np.abs(np.fft.rfft(wave))
      peak = np.argmax(spectrum) * 16000 / len(wave)
      assert {"low": peak < 450, "mid": 450 < peak < 1100, "high": peak > 1100}[labels[label]]


def test_graph_mode_gives_what_eager_gives(params):
  eager = np.concatenate([f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "eval")])
  with tf.Graph().as_default():
    # As tf.estimator calls it: inside a graph, consumed by a one-shot iterator.
    features, labels = tf.compat.v1.data.make_one_shot_iterator(
        audioclf.input_fn(params, "eval")).get_next()
    got = []
    with tf.compat.v1.Session() as sess:
      try:
        while True:
          got.append(sess.run(features["waveform"]))
      except tf.errors.OutOfRangeError:
        pass
  np.testing.assert_array_equal(np.concatenate(got), eager)


def test_random_window_shifts_and_pads_within_bounds():
  params = audioclf.Params(sample_rate=100, clip_seconds=1.0, time_shift_seconds=0.2)
  ramp = tf.range(1, 81, dtype=tf.float32)  # 0.8 s: shorter than the clip.
  outs = [pipeline._random_window(ramp, params, key).numpy() for key in range(50)]
  assert all(o.shape == (100,) for o in outs)
  for o in outs:
    nz = o[o != 0]
    np.testing.assert_array_equal(nz, np.arange(nz[0], nz[0] + len(nz)))  # One contiguous piece.
  assert len({o.tobytes() for o in outs}) > 10
  long = tf.range(1, 301, dtype=tf.float32)
  starts = {int(pipeline._random_window(long, params, key).numpy()[50]) for key in range(50)}
  np.testing.assert_array_equal(pipeline._random_window(long, params, 7),
                                pipeline._random_window(long, params, 7))  # Reproducible.
  assert len(starts) > 10


def test_center_window_is_deterministic():
  ramp = tf.range(10, dtype=tf.float32)
  np.testing.assert_array_equal(pipeline._center_window(ramp, 4), [3, 4, 5, 6])
  np.testing.assert_array_equal(pipeline._center_window(ramp, 12), list(range(10)) + [0, 0])
  ds = tf.data.Dataset.from_tensors(ramp).map(lambda w: pipeline._center_window(w, 4))
  np.testing.assert_array_equal(next(iter(ds)), [3, 4, 5, 6])  # Also inside tf.data.


def test_noise_is_added_at_the_asked_snr():
  params = audioclf.Params(noise_prob=1.0, noise_snr_db=20.0)
  clean = tf.sin(tf.linspace(0.0, 400.0, 16000))
  noise = (pipeline._add_noise(clean, params) - clean).numpy()
  snr = 20 * np.log10(np.sqrt(np.mean(clean.numpy() ** 2)) / np.sqrt(np.mean(noise ** 2)))
  assert abs(snr - 20.0) < 0.5
  np.testing.assert_array_equal(pipeline._add_noise(clean, params.replace(noise_prob=0.0)), clean)
  batch = tf.stack([clean] * 200)
  noisy_rows = (pipeline._add_noise(batch, params.replace(noise_prob=0.3), 5) != batch).numpy()
  assert 30 < noisy_rows.any(axis=1).sum() < 90  # Chosen per example, not per batch.


def test_bad_mode_split_and_empty_split(params):
  with pytest.raises(ValueError, match="mode must be one of"):
    audioclf.input_fn(params, "predict")
  with pytest.raises(ValueError, match="split must be one of"):
    audioclf.input_fn(params, "eval", split="dev")
  with pytest.raises(audioclf.manifest.DataError, match="'test' split .* is empty"):
    audioclf.input_fn(params, "eval", split="test")


def test_seed_offset_moves_training_to_a_new_stretch_of_its_sequence(params):
  def first_batches(offset):
    ds = audioclf.input_fn(params, "train", seed_offset=offset)
    return np.concatenate([y.numpy() for _, y in ds.take(3)])

  first_batches(0)  # Cold run: fills the cache.
  np.testing.assert_array_equal(first_batches(0), first_batches(0))
  assert not np.array_equal(first_batches(0), first_batches(100))  # A resumed run's order.


def test_graph_mode_takes_the_global_step_as_seed_offset(params):
  def labels_at(step):
    with tf.Graph().as_default():
      global_step = tf.compat.v1.train.get_or_create_global_step()
      ds = audioclf.input_fn(params, "train")
      it = tf.compat.v1.data.make_initializable_iterator(ds)
      labels = it.get_next()[1]
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(global_step.assign(step))
        sess.run(it.initializer)  # As the Estimator does, after restoring the step.
        return np.concatenate([sess.run(labels) for _ in range(3)])

  np.testing.assert_array_equal(labels_at(0), labels_at(0))
  assert not np.array_equal(labels_at(0), labels_at(500))
