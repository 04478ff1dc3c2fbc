"""input_fn: its contract (spec, modes, order), graph mode, and the augmentations after the cache."""

import numpy as np
import pytest
import tensorflow as tf

import audioclf
from audioclf import Params
from audioclf.data import manifest as manifest_lib
from audioclf.data import window as window_lib
from audioclf.params import ParamError
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


def test_no_pipeline_autotunes(params, tmp_path):
  """Destroying an iterator whose pipeline autotunes can wait up to a minute (batches.AUTOTUNE)."""
  cold = params.replace(cache_dir=str(tmp_path / "cold"))
  list(audioclf.input_fn(params, "eval"))  # Fills the validation split's cache: warm next.
  for p, modes in ((cold, ("train", "eval", "infer")), (params, ("eval", "infer"))):
    for mode in modes:
      assert audioclf.input_fn(p, mode).options().autotune.enabled is False, (mode, p.cache_dir)


def test_eval_reads_each_example_once_in_a_fixed_order(params):
  n = len(manifest_lib.load(params).split("validation"))
  runs = [[(f["waveform"].numpy(), y.numpy()) for f, y in audioclf.input_fn(params, "eval")]
          for _ in range(2)]
  assert sum(len(y) for _, y in runs[0]) == n
  for (wa, ya), (wb, yb) in zip(*runs):
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ya, yb)


def test_train_shuffles_anew_each_epoch_and_covers_every_file(params):
  params = params.replace(time_shift_seconds=0.0, clip_seconds=0.5)
  n = len(manifest_lib.load(params).split("train"))
  params = params.replace(batch_size=n)  # A batch is an epoch.
  batches = [f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "train").take(3)]
  epochs = np.concatenate(batches).reshape(3, n, -1)
  keys = [[row.tobytes() for row in epoch] for epoch in epochs]
  assert all(len(set(k)) == n for k in keys)  # Every file once per epoch...
  assert sorted(keys[0]) == sorted(keys[1]) == sorted(keys[2])
  assert keys[0] != keys[1] != keys[2]  # ...in a new order each time.
  warm = [f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "train").take(3)]
  np.testing.assert_array_equal(np.concatenate(warm), np.concatenate(batches))  # Cache-blind.


def batches_of(ds, steps):
  return [(f["waveform"].numpy(), y.numpy()) for f, y in ds.take(steps)]


def assert_same_batches(a, b):
  assert len(a) == len(b)
  for (wa, ya), (wb, yb) in zip(a, b):
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ya, yb)


@pytest.mark.parametrize("ext", ["wav", "flac"])
def test_one_seed_gives_the_same_batches_cold_warm_resumed_and_at_any_parallelism(tmp_path, ext):
  """With the default augmentation (time shift, clips longer than the window) and noise on."""
  data = write_tone_dataset(tmp_path / "data", per_label=8, seconds=1.3, ext=ext)
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=5,
                           validation_percent=25, testing_percent=0, noise_prob=0.5)
  assert params.time_shift_seconds > 0
  n = len(manifest_lib.load(params).split("train"))
  assert n % 5  # The last batch of every epoch straddles two epochs.
  steps = 3 * n // 5
  cold = assert_one_stream(params, tmp_path, steps, resume_at=(1, n // 5, steps - 2))
  waves = np.concatenate([w for w, _ in cold])
  assert len({row.tobytes() for row in waves}) == len(waves)  # New draws every epoch.
  labels = np.concatenate([y for _, y in cold])
  for epoch in range(2):  # Every file once per epoch, whatever the batch boundaries.
    counts = np.bincount(labels[epoch * n:(epoch + 1) * n], minlength=3)
    np.testing.assert_array_equal(counts, np.bincount(np.concatenate(
        [y for _, y in batches_of(audioclf.input_fn(params, "eval", split="train"), 99)])))


def assert_one_stream(params, tmp_path, steps, resume_at):
  """Cold, warm, native, resumed (warm and cold) and one-thread runs give the same batches."""
  cold = batches_of(audioclf.input_fn(params, "train"), steps)
  warm = batches_of(audioclf.input_fn(params, "train"), steps)
  assert_same_batches(cold, warm)
  native = batches_of(audioclf.input_fn(params, "train", native_read=True), steps)
  assert_same_batches(native, warm)  # No Python in the graph, the same bits.
  for step in resume_at:  # A resume at any step continues the same stream.
    assert_same_batches(batches_of(audioclf.input_fn(params, "train", seed_offset=step), 2),
                        cold[step:step + 2])
  resumed_cold = batches_of(audioclf.input_fn(params.replace(cache_dir=str(tmp_path / "c2")),
                                              "train", seed_offset=3), steps - 3)
  assert_same_batches(resumed_cold, cold[3:])  # Cold from the middle: same bits too.
  one_thread = audioclf.input_fn(params, "train").with_options(_one_thread())
  assert_same_batches(batches_of(one_thread, steps), cold)
  return cold


# Every augmentation the sampler draws, on at once.
EVERY_AUGMENTATION = dict(
    noise_prob=0.5, speed_perturb=(0.9, 1.1), pitch_shift_semitones=(-2.0, 2.0),
    tempo_perturb=(0.85, 1.15), pitch_tempo_prob=0.7, reverb_prob=0.5, gain_db=(-6.0, 6.0),
    mixup_alpha=0.3, balanced_sampler=True)


def test_every_augmentation_gives_the_same_batches_cold_warm_resumed_and_at_any_parallelism(
    tmp_path):
  data = write_tone_dataset(tmp_path / "data", per_label=8, seconds=1.3)
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=5,
                           validation_percent=25, testing_percent=0, **EVERY_AUGMENTATION)
  cold = assert_one_stream(params, tmp_path, 6, resume_at=(4,))
  waves = np.concatenate([w for w, _ in cold])
  assert len({row.tobytes() for row in waves}) == len(waves)
  plain = batches_of(audioclf.input_fn(params.replace(
      **{name: Params().to_dict()[name] for name in EVERY_AUGMENTATION}), "train"), 1)
  assert not np.array_equal(plain[0][0], cold[0][0])
  other = batches_of(audioclf.input_fn(params.replace(seed=1), "train"), 1)
  assert not np.array_equal(other[0][0], cold[0][0])  # Every draw follows the seed.


def _one_thread():
  options = tf.data.Options()
  options.threading.private_threadpool_size = 1
  return options


def test_a_batch_larger_than_the_split_is_a_clear_error(params):
  n = len(manifest_lib.load(params).split("train"))
  with pytest.raises(ParamError, match=rf"--batch_size={n + 1}: must be at most {n}, the "
                     "examples of the 'train' split"):
    audioclf.input_fn(params.replace(batch_size=n + 1), "train")
  ds = audioclf.input_fn(params.replace(batch_size=n + 1), "eval", split="train")
  assert [int(y.shape[0]) for _, y in ds] == [n]  # Evaluation: one short batch, no repeat.


def test_labels_match_their_folders(params):
  labels = manifest_lib.load(params).labels
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


def test_window_starts_shift_within_bounds_and_cover_the_span():
  u = tf.constant(np.linspace(0, 1, 1000, endpoint=False), tf.float64)
  starts = window_lib.window_start(u, 80, n=100, shift=20).numpy()  # A clip shorter than n.
  assert starts.min() == -20 and starts.max() == 20
  starts = window_lib.window_start(u, 300, n=100, shift=20).numpy()  # A longer one.
  assert starts.min() == -20 and starts.max() == 220 and len(set(starts)) > 200


def test_window_slices_and_pads_one_window_or_a_batch_alike():
  ramp = tf.range(1, 81, dtype=tf.float32)
  starts = (-100, -30, 0, 10, 70, 80, 200)
  wants = [np.array([k + 1 if 0 <= k < 80 else 0 for k in range(start, start + 100)], np.float32)
           for start in starts]
  for start, want in zip(starts, wants):
    np.testing.assert_array_equal(window_lib.cut(ramp, 0, 80, start, 100).numpy(), want)
  batch = window_lib.cut(ramp, tf.zeros([7], tf.int64), tf.fill([7], 80), list(starts), 100)
  np.testing.assert_array_equal(batch, np.stack(wants))


def test_a_skipped_file_is_labelled_minus_one_and_a_silence_row_kept():
  rows, lengths = tf.constant([0, 1, 2, 3]), tf.constant([5, 0, 7, 0], tf.int64)
  labels = window_lib.labels(rows, lengths, tf.constant([4, 5, 6, 7]), files=3)
  np.testing.assert_array_equal(labels, [4, -1, 6, 7])  # Row 3 is a _silence_ clip: no file.


def test_center_start_is_the_middle():
  assert int(window_lib.center_start(10, 4)) == 3
  assert int(window_lib.center_start(10, 12)) == 0
  ramp = tf.range(10, dtype=tf.float32)
  np.testing.assert_array_equal(window_lib.cut(ramp, 0, 10, 3, 4), [3, 4, 5, 6])


def test_bad_mode_split_and_empty_split(params):
  with pytest.raises(ValueError, match="mode must be one of"):
    audioclf.input_fn(params, "predict")
  with pytest.raises(ValueError, match="split must be one of"):
    audioclf.input_fn(params, "eval", split="dev")
  with pytest.raises(manifest_lib.DataError, match="'test' split .* is empty"):
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


def _batches(ds, n=2):
  return [(f["waveform"].numpy(), y.numpy()) for f, y in ds.take(n)]


def test_a_warm_dataset_built_again_is_reused_until_what_it_reads_changes(params):
  from audioclf.data import fill as fill_lib  # pylint: disable=g-import-not-at-top
  from audioclf.data import store as store_lib  # pylint: disable=g-import-not-at-top
  fill_lib.fill(params, ("train",))
  first = audioclf.input_fn(params, "train")
  assert audioclf.input_fn(params, "train") is first  # Construction saved.
  # A tuner trial that changes only the model or the optimizer reads the same data.
  assert audioclf.input_fn(params.replace(model_args={"width": 4}, optimizer="sgd", dropout=0.5),
                           "train") is first
  expected = _batches(first)
  # Another flag, mode or start builds anew.
  assert audioclf.input_fn(params.replace(noise_prob=0.5), "train") is not first
  assert audioclf.input_fn(params, "train", seed_offset=3) is not first
  # A file whose content changed is another split: cold again, then warm.
  manifest = manifest_lib.load(params)
  path = manifest.files("train")[0].path
  with open(path, "r+b") as f:
    f.seek(-2, 2)
    last = f.read(2)
    f.seek(-2, 2)
    f.write(bytes([last[0] ^ 0xFF, last[1]]))
  changed = audioclf.input_fn(params, "train")
  assert changed is not first
  fill_lib.fill(params, ("train",))
  assert audioclf.input_fn(params, "train") is not first
  # The same split filled again (another data file): built anew, the same batches.
  with open(path, "r+b") as f:
    f.seek(-2, 2)
    f.write(last)
  store = store_lib.Store.for_params(params)
  base = store.split_base(store.fingerprints.of(manifest.files("train")))
  import os  # pylint: disable=g-import-not-at-top
  os.remove(base + ".json")
  fill_lib.fill(params, ("train",))
  again = audioclf.input_fn(params, "train")
  assert again is not first
  for (wa, ya), (wb, yb) in zip(expected, _batches(again)):
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(ya, yb)


def test_a_caller_may_own_what_its_datasets_share(params):
  from audioclf.data import pipeline  # pylint: disable=g-import-not-at-top
  mine, shared = pipeline.Process(), pipeline.PROCESS.decodes.count
  evaluation = pipeline.make_for_inference(params, process=mine)
  files = len(manifest_lib.load(params).files("validation"))
  assert sum(int(y.shape[0]) for _, y in evaluation) == files
  assert mine.decodes.count == files  # The cold pass's decodes, counted where its caller keeps them.
  assert pipeline.PROCESS.decodes.count == shared
  warm = pipeline.make_for_inference(params, process=mine)
  assert pipeline.make_for_inference(params, process=mine) is warm
  assert pipeline.make_for_inference(params) is not warm  # Without a process nothing is kept.
  assert audioclf.input_fn(params, "eval") is not warm  # input_fn's are the process's own.
  assert audioclf.input_fn(params, "infer") is audioclf.input_fn(params, "eval")
  assert mine.decodes.count == files


def test_a_dataset_built_in_a_graph_is_never_reused(params):
  from audioclf.data import fill as fill_lib  # pylint: disable=g-import-not-at-top
  fill_lib.fill(params, ("train",))
  eager = audioclf.input_fn(params, "train")
  with tf.Graph().as_default():
    in_graph = audioclf.input_fn(params, "train", seed_offset=0)
    assert in_graph is not eager
    assert audioclf.input_fn(params, "train", seed_offset=0) is not in_graph
