"""The input-stall meter: it reads high when input is slow and low when the model is, in both engines."""

import time

import numpy as np
import pytest
import tensorflow as tf

from audioclf.compat import keras
from audioclf.engines.stall import EstimatorStallHook, KerasStallCallback, StallMeter


def sleep_op(x, seconds):
  """Passes x through after a wait that uses no CPU (releases the GIL)."""
  y = tf.numpy_function(lambda a: (time.sleep(seconds), a)[1], [x], x.dtype, stateful=True)
  return tf.ensure_shape(y, x.shape)


class SlowStep(keras.layers.Layer):
  def call(self, x):
    return sleep_op(x, 0.03)


def dataset(input_seconds_per_batch):
  ds = tf.data.Dataset.range(10**6).map(
      lambda i: (tf.random.uniform([16]), tf.cast(i % 2, tf.int32))).batch(8)
  if input_seconds_per_batch:
    ds = ds.map(lambda x, y: (sleep_op(x, input_seconds_per_batch), y))
  return ds.map(lambda x, y: ({"waveform": x}, y)).prefetch(2)


def model():
  inputs = keras.Input([16], name="waveform")
  outputs = keras.layers.Dense(2, activation="softmax")(SlowStep()(inputs))
  m = keras.Model({"waveform": inputs}, outputs)
  m.compile("sgd", "sparse_categorical_crossentropy")
  return m


# (seconds the input needs per batch, bounds of the stall fraction); the step itself takes 30 ms.
# A 90 ms input under a 30 ms step stalls 0.67 of the time; a loaded machine slows the step's
# own overhead too (0.46 seen at load 10), so the bound only says "far above the fed case".
CASES = [(0.0, (0.0, 0.2)), (0.09, (0.35, 1.0))]


@pytest.mark.parametrize("input_s, bounds", CASES)
def test_keras_meter(input_s, bounds, tmp_path):
  meter = StallMeter()
  model().fit(meter.attach(dataset(input_s)), steps_per_epoch=12, epochs=1, verbose=0, shuffle=False,
              callbacks=[KerasStallCallback(meter, str(tmp_path), every_steps=5)])
  assert meter.steps == 11  # The first step (tracing) is not counted.
  assert bounds[0] <= meter.fraction <= bounds[1]
  assert tf.io.gfile.glob(str(tmp_path / "events.out.tfevents.*"))


@pytest.mark.slow
@pytest.mark.legacy_only
@pytest.mark.parametrize("input_s, bounds", CASES)
def test_estimator_meter(input_s, bounds, tmp_path):
  meter = StallMeter()
  est = keras.estimator.model_to_estimator(keras_model=model(), model_dir=str(tmp_path))
  est.train(lambda: meter.attach(dataset(input_s)), steps=12,
            hooks=[EstimatorStallHook(meter, str(tmp_path), every_steps=5)])
  assert meter.steps == 11
  assert bounds[0] <= meter.fraction <= bounds[1]


def test_window_fraction_restarts():
  meter = StallMeter()
  for wait in (0.0, 0.0, 0.02):  # The first step is warm-up and not counted.
    meter.begin_step()
    time.sleep(wait)
    meter._mark_ready(blocked=wait)
    time.sleep(0.02)
    meter.end_step()
  assert meter.steps == 2
  assert 0.2 < meter.window_fraction() < 0.6
  assert meter.window_fraction() == 0.0
  np.testing.assert_allclose(meter.fraction, meter.wait_s / meter.step_s)


def test_probe_times_the_pipeline_only_and_keeps_elements():
  meter = StallMeter()
  slow = tf.data.Dataset.range(4).map(lambda i: (sleep_op(tf.cast(i, tf.float32), 0.05), i))
  blocked = []
  for x, y in meter.attach(slow):
    assert float(x) == float(y)
    blocked.append(meter._blocked)
  assert len(blocked) == 4 and min(blocked) >= 0.045
  assert meter.probes == 4  # Once per batch.
  # Prefetched batches are ready when asked for: however long the consumer
  # takes between batches, the probe sees no blocking.
  fast = tf.data.Dataset.range(4).map(lambda i: (tf.cast(i, tf.float32), i)).prefetch(4)
  it = iter(meter.attach(fast))
  next(it)
  for _ in range(3):
    time.sleep(0.05)
    next(it)
    assert meter._blocked < 0.01


def test_a_batch_fetched_before_the_step_began_waited_zero():
  meter = StallMeter(warmup_steps=0)
  meter._mark_ready(blocked=0.05)  # A device prefetcher fetched it ahead.
  meter.begin_step()
  time.sleep(0.01)
  meter.end_step()
  assert meter.steps == 1 and meter.wait_s == 0.0
