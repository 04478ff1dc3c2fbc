"""The log-mel front end and SpecAugment: what zeros, noise and a 440 Hz sine must give."""

import numpy as np
import pytest
import tensorflow as tf

from audioclf import Params
from audioclf.compat import keras
from audioclf.model.features import LogMelSpectrogram, SpecAugment, mel_matrix

SR = 16000


def _log_mel(**kwargs):
  return LogMelSpectrogram(sample_rate=SR, **kwargs)


def _sine(freq, seconds=1.0, sample_rate=SR):
  t = np.arange(int(seconds * sample_rate)) / sample_rate
  return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _mel(hz):
  return 1127.0 * np.log1p(np.asarray(hz) / 700.0)  # The scale tf.signal uses.


def test_shape_matches_frames_and_bands():
  layer = _log_mel(n_mels=40, frame_ms=30, stride_ms=10)
  out = layer(np.zeros([2, SR], np.float32))
  frames = 1 + (SR - 480) // 160
  assert out.shape == (2, frames, 40)
  assert layer.compute_output_shape((None, SR)) == (None, frames, 40)


def test_zeros_give_the_log_offset_everywhere():
  out = _log_mel(log_offset=1e-6)(np.zeros([1, SR], np.float32)).numpy()
  np.testing.assert_allclose(out, np.log(1e-6), rtol=1e-6)


def test_white_noise_is_finite_and_spread_over_all_bands():
  noise = np.random.default_rng(0).standard_normal([1, SR]).astype(np.float32) * 0.1
  out = _log_mel()(noise).numpy()
  assert np.isfinite(out).all()
  per_band = out.mean(axis=(0, 1))
  # Every band holds energy far above silence; none dominates like a tone would.
  assert (per_band > np.log(1e-6) + 5).all()
  assert per_band.max() - np.median(per_band) < 3.0


def test_440hz_sine_peaks_in_the_band_centred_nearest_440hz():
  layer = _log_mel(n_mels=40, fmin=20.0, fmax=7600.0)
  out = layer(_sine(440.0)[np.newaxis]).numpy()
  centres = np.linspace(_mel(20.0), _mel(7600.0), 40 + 2)[1:-1]
  expected = int(np.argmin(np.abs(centres - _mel(440.0))))
  assert int(np.argmax(out[0].mean(axis=0))) == expected
  # A higher tone lands in a higher band.
  high = layer(_sine(3000.0)[np.newaxis]).numpy()
  assert np.argmax(high[0].mean(axis=0)) > expected


def test_fmax_above_nyquist_stops_at_nyquist():
  layer = LogMelSpectrogram(sample_rate=8000, fmax=7600.0)
  assert layer.upper_hz == 4000.0
  assert np.isfinite(layer(np.zeros([1, 4000], np.float32)).numpy()).all()
  with pytest.raises(ValueError, match="fmin"):
    LogMelSpectrogram(sample_rate=8000, fmin=5000.0)


def test_same_values_eagerly_and_inside_tf_data():
  layer = _log_mel()
  wave = _sine(1000.0)[np.newaxis]
  eager = layer(wave).numpy()
  ds = tf.data.Dataset.from_tensors(wave).map(layer)
  np.testing.assert_allclose(next(iter(ds)).numpy(), eager, rtol=1e-5, atol=1e-5)


def test_a_graph_that_builds_the_layer_holds_its_filters_as_one_constant():
  # Each Estimator graph builds the model again: the filters are computed once per
  # configuration, not as tf.signal's 255 ops in every graph.
  with tf.Graph().as_default() as graph:
    layer = _log_mel()
    layer(tf.zeros([1, 16000]))
  # The STFT and the rest: ~100 ops; the filters built in place added 255 more.
  assert len(graph.get_operations()) < 150, len(graph.get_operations())
  with tf.Graph().as_default():
    reference = tf.signal.linear_to_mel_weight_matrix(40, 257, 16000, 20.0, 7600.0)
    with tf.compat.v1.Session() as session:
      reference = session.run(reference)
  np.testing.assert_array_equal(mel_matrix(40, 257, SR, 20.0, 7600.0), reference)


def test_from_params_and_config_round_trip():
  params = Params(sample_rate=8000, n_mels=32, frame_ms=25, stride_ms=10, fmin=60, fmax=3800)
  layer = LogMelSpectrogram.from_params(params)
  clone = LogMelSpectrogram.from_config(layer.get_config())
  assert clone.get_config() == layer.get_config()
  assert (clone.frame_length, clone.frame_step, clone.fft_length) == (200, 80, 256)
  augment = SpecAugment(freq_masks=1, max_freq_bins=3, time_masks=2, max_time_frames=4)
  assert SpecAugment.from_config(augment.get_config()).get_config() == augment.get_config()


def test_spec_augment_masks_only_in_training():
  x = tf.random.normal([4, 50, 40])
  layer = SpecAugment(max_freq_bins=8, max_time_frames=10)
  np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
  np.testing.assert_array_equal(layer(x).numpy(), x.numpy())  # Inference by default.
  masked = layer(x, training=True).numpy()
  changed = masked != x.numpy()
  assert changed.any()
  # Masked cells take the example's mean, and whole bands or spans change together.
  means = x.numpy().mean(axis=(1, 2))
  for i in range(4):
    np.testing.assert_allclose(masked[i][changed[i]], means[i], rtol=1e-5)
  assert changed.mean() < 0.6


@pytest.mark.legacy_only  # Keras 3 has no learning phase: it always passes `training`.
def test_spec_augment_follows_the_graph_mode_learning_phase():
  # model_to_estimator's clone calls layers with training=None and sets the
  # learning phase instead; masks must apply in its training graph only.
  with tf.Graph().as_default():
    x = tf.random.normal([4, 50, 40], seed=1)
    layer = SpecAugment()
    with keras.backend.learning_phase_scope(1):
      train_out = layer(x)
    with keras.backend.learning_phase_scope(0):
      eval_out = layer(x)
    with tf.compat.v1.Session() as sess:
      x_v, train_v, eval_v = sess.run([x, train_out, eval_out])
  assert (train_v != x_v).any()
  np.testing.assert_array_equal(eval_v, x_v)
