"""The augmentations after the cache: the registry, and each one doing what its flags say, eagerly, in tf.data and through input_fn."""


import dataclasses

import numpy as np
import pytest
import soundfile as sf
import tensorflow as tf

import audioclf
from audioclf.data import fill as fill_lib
from audioclf.data import pipeline
from audioclf.data import manifest as manifest_lib
from audioclf.data import sampler as sampler_lib
from audioclf.data import streams as streams_lib
from audioclf.data.augmentations import ORDER, registered
from audioclf.data.augmentations import base, pitch_tempo, program, reverb, speed, tail
from conftest import write_tone_dataset

SR = 16000
N = 16000


def _tone(freq, n=N, start=0, stop=None):
  t = np.arange(n) / SR
  x = 0.5 * np.sin(2 * np.pi * freq * t)
  x[:start] = 0
  if stop is not None:
    x[stop:] = 0
  return x.astype(np.float32)


def _peak_hz(waves):
  """The strongest frequency of each row's middle half, in Hz."""
  n = waves.shape[-1]
  middle = waves[:, n // 4:3 * n // 4] * np.hanning(n // 2)
  return np.argmax(np.abs(np.fft.rfft(middle, axis=-1)), axis=-1) * SR / (n // 2)


def _span(wave, level=0.1):
  """First and last sample above `level`: where a tone burst is."""
  loud = np.flatnonzero(np.abs(wave) > level)
  return loud[0], loud[-1]


def _sampler(**changes):
  params = audioclf.Params(**{"batch_size": 8, **changes})
  return sampler_lib.Sampler(params, 100, labels=np.arange(100) % 4, num_classes=4,
                             unknown_label=3)


def _in_tf_data(fn, *tensors):
  """fn over the tensors as one element of a tf.data map: the graph input_fn runs it in."""
  return next(iter(tf.data.Dataset.from_tensors(tensors).map(fn)))


# Each augmentation at settings that turn it on: a new one's author adds its own here.
SETTINGS = {
    "tail": dict(tail_prob=0.5),
    "pitch_tempo": dict(pitch_shift_semitones=(-2.0, 2.0), tempo_perturb=(0.9, 1.1),
                        pitch_tempo_prob=0.5),
    "reverb": dict(reverb_prob=0.5),
    "speed": dict(speed_perturb=(0.9, 1.1)),
    "noise": dict(noise_prob=0.5),
    "gain": dict(gain_db=(-6.0, 6.0)),
    "mixup": dict(mixup_alpha=0.2),
}
_EVERY = {field: value for settings in SETTINGS.values() for field, value in settings.items()}


def test_the_registry_is_order_and_each_augmentation_has_fields_and_streams_of_its_own():
  classes = registered()
  assert [c.name for c in classes] == list(ORDER) == list(SETTINGS)
  streams = [s for c in classes for s in c.streams]
  assert len(streams) == len(set(streams)) and "window" not in streams  # The sampler's own.
  fields = [f for c in classes for f in c.fields]
  assert len(fields) == len(set(fields))
  assert set(fields) <= {f.name for f in dataclasses.fields(audioclf.Params)}  # Names kept.
  for c in classes:
    assert set(SETTINGS[c.name]) <= set(c.fields), c.name


@pytest.mark.parametrize("name", ORDER)
def test_each_augmentation_is_off_at_the_defaults_and_on_at_its_settings_in_training(name):
  def on(training, **changes):
    return [a.name for a in _sampler(**changes).augmenter.on(training)]

  assert name not in on(True) and name in on(True, **SETTINGS[name])
  assert name not in on(False, **SETTINGS[name])  # Noise: only a _silence_ clip's (below).


@pytest.mark.parametrize("name", ORDER)
def test_each_augmentation_alone_changes_the_batch_alike_eagerly_and_in_tf_data(name):
  sampler = _sampler(**SETTINGS[name])
  waves = tf.constant(np.stack([_tone(300.0 + 100.0 * i, start=2000, stop=14000)
                                for i in range(8)]))
  labels = tf.range(8) % 4
  out, _ = sampler.augment(waves, labels, 2)
  assert out.shape == waves.shape and out.dtype == tf.float32
  assert not np.array_equal(out, waves)
  # Plain ops (the legacy stack) may round apart by an ulp once tf.data's graph is optimized.
  np.testing.assert_allclose(
      _in_tf_data(lambda w, y: sampler.augment(w, y, 2)[0], waves, labels), out, atol=1e-6)
  np.testing.assert_array_equal(sampler.augment(waves, labels, 2)[0], out)
  assert not np.array_equal(sampler.augment(waves, labels, 3)[0], out)


def _draws(sampler, k=3):
  """{name: its draws as arrays} of each augmentation of `sampler` in training batch k."""
  augmenter = sampler.augmenter
  batch = base.Batch(tf.zeros([8, 400]), tf.zeros([8], tf.int32), k, True, augmenter.streams)
  out = {}
  for augmentation in augmenter.on(True):
    batch.drawing = augmentation.streams
    out[augmentation.name] = [np.asarray(t) for t in tf.nest.flatten(augmentation.draw(batch))]
  return out


@pytest.mark.parametrize("name", ORDER)
def test_adding_or_removing_an_augmentation_leaves_the_others_draws_unchanged(name):
  alone = _draws(_sampler(**SETTINGS[name]))[name]
  assert alone
  others = [{f: v for f, v in _EVERY.items() if f not in SETTINGS[other]}
            for other in ORDER if other != name]  # Each other one removed in turn.
  for changes in [_EVERY] + others:
    got = _draws(_sampler(**changes))[name]
    assert len(got) == len(alone)
    for a, b in zip(alone, got):
      np.testing.assert_array_equal(a, b)
  later = _draws(_sampler(**SETTINGS[name]), k=4)[name]
  assert not all(np.array_equal(a, b) for a, b in zip(alone, later))


def test_an_augmentation_draws_from_its_own_streams_only():
  batch = base.Batch(tf.zeros([2, 10]), tf.zeros([2], tf.int32), 0, True, streams_lib.Streams(0))
  batch.drawing = ("gain",)
  batch.uniform("gain")
  with pytest.raises(ValueError, match="'speed' is not one of"):
    batch.uniform("speed")


def test_speed_perturbation_moves_a_tone_by_the_factor():
  waves = np.stack([_tone(1000.0)] * 4)
  factors = tf.constant([0.9, 1.0, 1.1, 1.25])
  for got in (speed.resample(waves, factors), _in_tf_data(speed.resample, waves, factors)):
    np.testing.assert_allclose(_peak_hz(got.numpy()), [900, 1000, 1100, 1250], atol=2)
  np.testing.assert_allclose(speed.resample(waves, tf.ones([4]))[1], waves[1], atol=1e-6)


def test_resampling_reads_between_samples_linearly_and_zero_outside_the_clip():
  rng = np.random.default_rng(0)
  waves = rng.uniform(-1, 1, (6, 400)).astype(np.float32)
  factors = np.array([0.7, 0.9, 1.0, 1.0001, 1.1, 1.4])
  n, centre = waves.shape[1], (waves.shape[1] - 1) / 2
  at = centre + (np.arange(n) - centre) * factors[:, None]
  want = [np.interp(x, np.arange(n), w, left=0, right=0) for x, w in zip(at, waves)]
  got = program.apply(tf.constant(waves), None,
                      [program.Step(speed._read_at, (factors.astype(np.float32),))])[0]
  # Reads within float32 rounding of the clip's first or last sample may fall either side.
  edge = (np.abs(at) < 1e-3) | (np.abs(at - (n - 1)) < 1e-3)
  np.testing.assert_allclose(np.where(edge, 0, got), np.where(edge, 0, want), atol=2e-4)
  assert (got.numpy()[at < -1e-3] == 0).all() and (got.numpy()[at > n - 1 + 1e-3] == 0).all()


def test_speeding_up_removes_what_would_fold_over_nyquist():
  waves = np.stack([_tone(7500.0)] * 2)
  out = speed.resample(waves, tf.constant([1.0, 1.1])).numpy()
  rms = np.sqrt(np.mean(out ** 2, axis=-1))
  assert rms[0] > 0.3 and rms[1] < 0.01  # 8250 Hz does not exist at 16 kHz: gone, not aliased.
  # The vocoder's examples are band-limited on its own spectra: 3 semitones up, 7500 Hz is
  # gone, 6000 Hz is 7135 Hz (at half its level: linear interpolation so near Nyquist).
  waves = np.stack([_tone(7500.0), _tone(6000.0)])
  out, _ = _sampler(batch_size=2, pitch_shift_semitones=(3.0, 3.0)).augment(
      tf.constant(waves), tf.zeros([2], tf.int32), 0)
  rms = np.sqrt(np.mean(out.numpy() ** 2, axis=-1))
  assert rms[0] < 0.01 and rms[1] > 0.15, rms
  np.testing.assert_allclose(_peak_hz(out.numpy()[1:]), 6000 * 2 ** (3 / 12), atol=3)
  # So are the reverberated ones, on the reverberation's spectra; the others take a low-pass of
  # their own: every example sped up by 1.1, half of them reverberated, 7500 Hz gone from all.
  sampler = _sampler(batch_size=16, speed_perturb=(1.1, 1.1), reverb_prob=0.5,
                     reverb_rt60=(0.2, 0.3))
  waves = tf.constant(np.stack([_tone(7500.0)] * 16))
  out = _in_tf_data(lambda w: sampler.augment(w, tf.zeros([16], tf.int32), 3)[0], waves).numpy()
  assert np.sqrt(np.mean(out ** 2, axis=-1)).max() < 0.01
  # Without the cutoff the reverberation keeps 7500 Hz, and with it removes only what is above.
  spectra = reverb.response_spectra(np.eye(1, 500, dtype=np.float32), N)
  for cutoff, kept in ((1.0, True), (0.9, False), (7600 / 8000, True)):
    out = reverb.reverberate(waves[:1], spectra, tf.zeros([1], tf.int32), None,
                              tf.constant([cutoff])).numpy()
    assert (np.sqrt(np.mean(out ** 2)) > 0.3) == kept, cutoff


def test_tempo_stretch_keeps_the_pitch_and_scales_the_duration():
  burst = _tone(1000.0, start=6000, stop=10000)
  waves = np.stack([burst] * 4)
  rates = tf.constant([1.0, 0.8, 1.25, 2.0])
  frame = pitch_tempo.vocoder_frame(SR)
  out = _in_tf_data(lambda w, r: pitch_tempo.stretch(w, r, frame), waves, rates).numpy()
  np.testing.assert_allclose(out[0], burst, atol=1e-5)  # Rate 1: the clip back.
  for wave, rate in zip(out, rates.numpy()):
    first, last = _span(wave)
    assert abs((last - first) - 4000 / rate) < 0.03 * 4000 / rate
    assert abs((first + last) / 2 - 8000) < 200  # Stretched about the centre.
  np.testing.assert_allclose(_peak_hz(out), 1000, atol=3)


def test_pitch_shift_moves_the_tone_and_keeps_its_duration():
  waves = tf.constant(np.stack([_tone(1000.0, start=4000, stop=12000)] * 8))
  labels = tf.zeros([8], tf.int32)
  out, _ = _sampler(pitch_shift_semitones=(3.0, 3.0)).augment(waves, labels, 0)
  np.testing.assert_allclose(_peak_hz(out.numpy()), 1000 * 2 ** (3 / 12), atol=3)
  for wave in out.numpy():
    first, last = _span(wave)
    assert abs((last - first) - 8000) < 250


def test_speed_pitch_and_tempo_are_drawn_per_example_within_their_ranges():
  waves = tf.constant(np.stack([_tone(1000.0, start=4000, stop=12000)] * 8))
  labels = tf.zeros([8], tf.int32)
  sampler = _sampler(speed_perturb=(0.9, 1.1), tempo_perturb=(0.8, 1.2))
  out, _ = sampler.augment(waves, labels, 3)
  peaks = _peak_hz(out.numpy())
  assert np.all((peaks > 895) & (peaks < 1105)) and len(set(np.round(peaks))) > 4
  durations = np.array([np.subtract(*_span(w)[::-1]) for w in out.numpy()])
  # Tempo moves by speed x tempo (0.72 to 1.32): durations of 8000 / that.
  assert np.all((durations > 8000 / 1.33) & (durations < 8000 / 0.71)), durations
  again, _ = sampler.augment(waves, labels, 3)
  np.testing.assert_array_equal(out, again)
  assert not np.array_equal(out, sampler.augment(waves, labels, 4)[0])


def test_pitch_tempo_prob_sends_that_share_through_the_vocoder():
  waves = tf.constant(np.stack([_tone(1000.0)] * 64))
  labels = tf.zeros([64], tf.int32)
  out, _ = _sampler(batch_size=64, pitch_shift_semitones=(4.0, 4.0), pitch_tempo_prob=0.5
                    ).augment(waves, labels, 0)
  peaks = _peak_hz(out.numpy())
  shifted = np.isclose(peaks, 1000 * 2 ** (4 / 12), atol=3)
  assert np.all(shifted | np.isclose(peaks, 1000, atol=3)) and 16 < shifted.sum() < 48


def _decay_db_per_second(response):
  """The slope of the energy envelope of an impulse response, in dB per second."""
  energy = np.convolve(response ** 2, np.ones(160) / 160, mode="valid")
  t = np.arange(len(energy)) / SR
  inside = (t > 0.02) & (10 * np.log10(energy + 1e-30) > 10 * np.log10(energy.max()) - 50)
  return np.polyfit(t[inside], 10 * np.log10(energy[inside]), 1)[0]


def test_synthetic_responses_decay_60_db_in_their_rt60():
  noise = tf.random.stateless_uniform([2, 12000], [1, 2], -3 ** 0.5, 3 ** 0.5)
  rirs = reverb.synthetic_rirs(noise, tf.constant([0.25, 0.5]), SR).numpy()
  assert np.all(rirs[:, 0] == 1.0)  # The direct path, at tap 0.
  np.testing.assert_allclose(np.sum(rirs[:, 1:] ** 2, axis=1), 1.0, rtol=1e-4)  # DRR 0 dB.
  assert abs(_decay_db_per_second(rirs[0]) + 60 / 0.25) < 12
  assert abs(_decay_db_per_second(rirs[1]) + 60 / 0.5) < 6


def test_the_bank_cuts_a_synthetic_response_where_its_tail_is_60_db_below_the_direct_path():
  taps = reverb.synthetic_taps(0.8, SR, N)
  assert 0.35 * SR < taps < 0.45 * SR  # About half the RT60, not all of it.
  noise = tf.random.stateless_uniform([1, 12800], [3, 4], -3 ** 0.5, 3 ** 0.5)
  whole = reverb.synthetic_rirs(noise, tf.constant([0.8]), SR).numpy()[0]
  around = np.sqrt(np.mean(whole[taps - 160:taps + 160] ** 2))
  assert abs(20 * np.log10(around) + 60) < 1.5  # The direct path is 1.
  assert np.sum(whole[taps:] ** 2) < 1e-3 * np.sum(whole[1:] ** 2)  # What is left out.
  assert reverb.synthetic_taps(0.8, SR, 4000) == 4000  # Never more than a clip.


def test_reverberation_convolves_keeps_the_level_and_takes_its_chance():
  click = np.zeros(N, np.float32)
  click[2000] = 1.0
  rir = np.zeros([1, 3000], np.float32)
  rir[0, [0, 800, 2500]] = [1.0, 0.5, -0.25]
  out = reverb.reverberate(click[None], reverb.response_spectra(rir, N)).numpy()[0]
  np.testing.assert_allclose(out[[2000, 2800, 4500]] / out[2000], [1.0, 0.5, -0.25], atol=1e-5)
  np.testing.assert_allclose(np.sqrt(np.mean(out ** 2)), np.sqrt(np.mean(click ** 2)), rtol=1e-4)
  waves = tf.constant(np.stack([_tone(500.0)] * 64))
  sampler = _sampler(batch_size=64, reverb_prob=0.3, reverb_rt60=(0.3, 0.6))
  got = _in_tf_data(lambda w: sampler.augment(w, tf.zeros([64], tf.int32), 5)[0], waves).numpy()
  changed = np.any(np.abs(got - waves.numpy()) > 1e-4, axis=1)
  assert 8 < changed.sum() < 32  # Chosen per example.
  np.testing.assert_array_equal(got[~changed], waves.numpy()[~changed])


def test_gain_is_drawn_in_db_per_example():
  waves = tf.constant(np.stack([_tone(500.0)] * 64))
  out, _ = _sampler(batch_size=64, gain_db=(-6.0, 6.0)).augment(waves, tf.zeros([64], tf.int32), 0)
  db = 20 * np.log10(np.abs(out.numpy()).max(1) / np.abs(waves.numpy()).max(1))
  assert -6.01 < db.min() < -4 and 4 < db.max() < 6.01 and len(set(np.round(db, 3))) == 64


def test_mixup_mixes_examples_and_their_labels_alike():
  # Example i is the constant i with label i: a mixed example's value is its label's mean.
  waves = tf.constant(np.repeat(np.arange(8, dtype=np.float32)[:, None], 100, axis=1))
  sampler = sampler_lib.Sampler(audioclf.Params(batch_size=8, mixup_alpha=0.4), 8,
                                num_classes=8)
  out, soft = sampler.augment(waves, tf.range(8), 2)
  out, soft = out.numpy(), soft.numpy()
  assert soft.shape == (8, 8)
  np.testing.assert_allclose(soft.sum(1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(out[:, 0], soft @ np.arange(8), rtol=1e-5)
  assert (np.count_nonzero(soft > 1e-6, axis=1) <= 2).all() and (soft.max(1) < 1).any()
  eval_out, eval_labels = sampler.augment(waves, tf.range(8), 2, training=False)
  np.testing.assert_array_equal(eval_out, waves)  # Evaluation is never mixed.
  np.testing.assert_array_equal(eval_labels, np.arange(8))


def test_a_word_tail_keeps_the_end_of_its_word_at_the_window_start_labelled_unknown():
  # Rows 0-5 keywords, 6 _silence_, 7 _unknown_: a burst of 8000 samples each, from 2000 + 500 i.
  waves = np.stack([_tone(440.0, 32000, 2000 + 500 * i, 10000 + 500 * i) for i in range(8)])
  waves += 1e-4 * np.random.default_rng(0).standard_normal(waves.shape).astype(np.float32)
  labels = tf.constant([0, 1, 2, 0, 1, 2, 4, 3])
  sampler = sampler_lib.Sampler(audioclf.Params(batch_size=8, tail_prob=1.0, tail_keep=0.25),
                                100, silence_label=4, num_classes=5, unknown_label=3)
  out, got = sampler.augment(tf.constant(waves), labels, 0)
  np.testing.assert_array_equal(got, [3, 3, 3, 3, 3, 3, 4, 3])
  for row in range(6):
    first, last = _span(out.numpy()[row])
    assert first < 80 and abs(last - 2000) < 160, (row, first, last)  # A quarter, within a frame.
  np.testing.assert_array_equal(out[7], waves[7])  # _unknown_ as it was (_silence_ takes noise).
  some = sampler_lib.Sampler(audioclf.Params(batch_size=8, tail_prob=0.3), 100, num_classes=5,
                             unknown_label=3)
  many = tf.constant(np.tile(waves[:1], (200, 1)))
  moved = some.augment(many, tf.zeros([200], tf.int32), 5)[1].numpy() == 3
  assert 40 < moved.sum() < 80  # Chosen per example, at its chance.
  with pytest.raises(ValueError, match="no _unknown_ class"):
    sampler_lib.Sampler(audioclf.Params(tail_prob=0.1), 100)


def test_word_tails_reach_training_batches_through_input_fn(tmp_path):
  data = write_tone_dataset(tmp_path / "data", labels=("low", "_unknown_"), per_label=8)
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=6,
                           clip_seconds=0.5, time_shift_seconds=0.0, tail_prob=1.0,
                           tail_keep=(0.5, 0.5), validation_percent=25, testing_percent=0)
  features, labels = next(iter(audioclf.input_fn(params, "train")))
  assert (labels.numpy() == 0).all()  # "_unknown_" sorts first: every clip is one now.
  waves = features["waveform"].numpy()
  tails = np.abs(waves[:, 4400:]).max(1) < 0.01  # A tone of 8000 samples kept half lasts 4000.
  assert tails.any() and not tails.all() and (np.abs(waves[tails, :3600]).max(1) > 0.1).all()
  hz = np.argmax(np.abs(np.fft.rfft(waves[:, :3200], axis=-1)), axis=-1) * SR / 3200
  assert (hz[tails] < 450).all() and (hz[~tails] > 450).all()  # "low" (300 Hz) became tails.


@pytest.mark.parametrize("count", [0, 3, 8, 13])
def test_on_rows_transforms_the_chosen_rows_only(count):
  waves = tf.constant(np.arange(20 * 4, dtype=np.float32).reshape(20, 4))
  chosen = np.zeros(20, bool)
  chosen[np.random.default_rng(count).choice(20, count, replace=False)] = True
  step = tf.range(20, dtype=tf.float32)
  transform = lambda w, c, s: program.on_rows(lambda rows, s: rows + s[:, None], w, c, s)  # noqa: E731
  for got in (transform(waves, chosen, step), _in_tf_data(transform, waves, chosen, step)):
    np.testing.assert_array_equal(got, waves.numpy() + np.where(chosen, np.arange(20), 0)[:, None])


def test_what_is_off_adds_nothing():
  sampler = _sampler()
  assert not sampler.augments(True)
  waves = tf.constant(np.stack([_tone(700.0)] * 8))
  out, labels = sampler.augment(waves, tf.zeros([8], tf.int32), 0)
  assert out is waves


@pytest.fixture
def words(tmp_path):
  data = write_tone_dataset(tmp_path / "data", per_label=8, seconds=1.0)
  return audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=6,
                         validation_percent=25, testing_percent=0)


def test_a_rir_folder_is_decoded_once_into_the_cache_and_convolved(words, tmp_path):
  folder = tmp_path / "rirs"
  folder.mkdir()
  rir = np.zeros(4000, np.float32)
  rir[[300, 1100]] = [0.8, 0.4]  # A lead-in of 300 samples, then the direct path and an echo.
  sf.write(folder / "room.wav", rir, SR, subtype="FLOAT")
  params = words.replace(rir_dir=str(folder), reverb_prob=1.0, time_shift_seconds=0.0)
  assert fill_lib.fill(params, ("train",))["rir"]["decoded"] == 1
  before = pipeline.PROCESS.decodes.count
  clean = [f["waveform"].numpy() for f, _ in audioclf.input_fn(
      params.replace(reverb_prob=0.0), "train").take(2)]
  wet = [f["waveform"].numpy() for f, _ in audioclf.input_fn(params, "train").take(2)]
  assert pipeline.PROCESS.decodes.count == before  # Nothing decoded again.
  for c, w in zip(clean, wet):
    echo = c + 0.5 * np.pad(c, [[0, 0], [800, 0]])[:, :N]  # The direct path at tap 0.
    echo *= np.sqrt(np.mean(c ** 2, 1, keepdims=True) / np.mean(echo ** 2, 1, keepdims=True))
    np.testing.assert_allclose(w, echo, atol=2e-4)
  with pytest.raises(manifest_lib.DataError, match="rir_dir"):
    audioclf.input_fn(params.replace(rir_dir=str(tmp_path / "nowhere")), "train")


def test_noise_is_added_at_the_asked_snr():
  params = audioclf.Params(noise_prob=1.0, noise_snr_db=20.0)
  sampler = sampler_lib.Sampler(params, 1)
  clean = tf.sin(tf.linspace(0.0, 400.0, 16000))[None]
  label = tf.zeros([1], tf.int32)
  noisy = lambda s, w, y, k: s.augment(w, y, k)[0]  # noqa: E731
  added = (noisy(sampler, clean, label, 0) - clean).numpy()
  snr = 20 * np.log10(np.sqrt(np.mean(clean.numpy() ** 2)) / np.sqrt(np.mean(added ** 2)))
  assert abs(snr - 20.0) < 0.1
  quiet = sampler_lib.Sampler(params.replace(noise_prob=0.0), 1)
  assert not quiet.augments(True)
  np.testing.assert_array_equal(noisy(quiet, clean, label, 0), clean)
  batch = tf.concat([clean] * 200, 0)
  labels = tf.zeros([200], tf.int32)
  some = sampler_lib.Sampler(params.replace(noise_prob=0.3), 1)
  noisy_rows = (noisy(some, batch, labels, 5) != batch).numpy()
  assert 30 < noisy_rows.any(axis=1).sum() < 90  # Chosen per example, not per batch.
  np.testing.assert_array_equal(noisy(some, batch, labels, 5), noisy(some, batch, labels, 5))
  assert not np.array_equal(noisy(some, batch, labels, 5), noisy(some, batch, labels, 6))
  # A range: each example its own level, uniform in dB between the two.
  ranged = sampler_lib.Sampler(params.replace(noise_snr_db=(5.0, 25.0)), 1)
  added = (noisy(ranged, batch, labels, 5) - batch).numpy()
  snrs = 20 * np.log10(np.sqrt(np.mean(batch.numpy() ** 2, 1)) / np.sqrt(np.mean(added ** 2, 1)))
  assert 4.9 < snrs.min() < 7.0 and 23.0 < snrs.max() < 25.1


def test_no_two_draws_share_a_key(monkeypatch):
  asked = []
  real = streams_lib.stream_key

  def recording(seed, name, at):
    key = real(seed, name, at)
    asked.append((name, int(at), tuple(key.numpy())))
    return key

  monkeypatch.setattr(streams_lib, "stream_key", recording)
  for index in range(2):  # Two shards of one run: their keys must stay apart too.
    sampler = sampler_lib.Sampler(audioclf.Params(batch_size=8, **_EVERY), 100, (index, 2),
                                  silence_label=1, num_classes=4, unknown_label=2)
    for k in range(4):
      before = len(asked)
      sampler.augment(tf.zeros([8, 400]), tf.zeros([8], tf.int32), k)
      sampler.augment(tf.zeros([8, 400]), tf.zeros([8], tf.int32), k, training=False)
      sampler.window_draw(k * 8)
      names = [name for name, _, _ in asked[before:]]
      assert len(names) == len(set(names)), names  # One key per draw of a batch.
  draws = {(name, at): key for name, at, key in asked}
  assert {"window", "tail", "speed", "reverb", "noise", "silence", "gain", "mixup"} <= {
      name for name, _ in draws}
  assert len(set(draws.values())) == len(draws)
