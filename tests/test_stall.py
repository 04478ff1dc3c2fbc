"""The input-stall meter: it reads high when input is slow and low when the model is, in both engines."""

import time

import pytest
import tensorflow as tf

from audioclf.compat import keras
from audioclf.engines.stall import EstimatorStallHook, KerasStallCallback, StallMeter
from conftest import FakeTime


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


def _stall_fraction(engine, input_s, tmp_path):
  """The stall fraction of 6 steps of `engine` (5 measured) on an input of `input_s` s a batch."""
  meter = StallMeter()
  if engine == "keras":
    model().fit(meter.attach(dataset(input_s)), steps_per_epoch=6, epochs=1, verbose=0,
                shuffle=False, callbacks=[KerasStallCallback(meter, str(tmp_path), every_steps=5)])
  else:
    est = keras.estimator.model_to_estimator(keras_model=model(), model_dir=str(tmp_path))
    est.train(lambda: meter.attach(dataset(input_s)), steps=6,
              hooks=[EstimatorStallHook(meter, str(tmp_path), every_steps=5)])
  assert meter.steps == 5  # The first step (tracing) is not counted.
  assert tf.io.gfile.glob(str(tmp_path / "events.out.tfevents.*"))
  return meter.fraction


@pytest.mark.parametrize("engine", [
    "keras", pytest.param("estimator", marks=[pytest.mark.slow, pytest.mark.legacy_only])])
@pytest.mark.slow
def test_meter_reads_a_starved_step_far_above_a_fed_one(engine, tmp_path):
  # The step takes 30 ms. An input of 300 ms a batch stalls about 0.9 of the
  # time, a prefetched instant one about 0; a loaded machine slows the step's
  # own overhead too, which lowers the first (0.46 seen at load 10 with a
  # 90 ms input), so only the order is asserted, with a wide margin. What the
  # meter reads, and what it costs, is measured by tools/bench_train.py.
  fed = _stall_fraction(engine, 0.0, tmp_path / "fed")
  starved = _stall_fraction(engine, 0.3, tmp_path / "starved")
  assert 0.0 <= fed < starved <= 1.0
  assert starved - fed > 0.3, (fed, starved)


def test_window_fraction_restarts():
  now = FakeTime()
  meter = StallMeter(clock=now)
  # (seconds the probe saw the batch blocked, seconds into the step it came, seconds of the
  # step after it): the first step is warm-up and not counted.
  for blocked, ready_after, rest in ((0.5, 0.5, 0.5), (0.0, 0.0, 0.5), (0.25, 0.25, 0.25)):
    meter.begin_step()
    now.advance(ready_after)
    meter._mark_ready(blocked=blocked)
    now.advance(rest)
    meter.end_step()
  assert meter.steps == 2 and meter.step_s == 1.0 and meter.wait_s == 0.25
  assert meter.window_fraction() == 0.25
  assert meter.window_fraction() == 0.0  # A new window: no steps yet.
  meter.begin_step()
  now.advance(0.5)
  meter._mark_ready(blocked=0.5)
  meter.end_step()
  assert meter.window_fraction() == 1.0  # Only the last step's.
  assert meter.fraction == 0.75 / 1.5


def test_a_step_waits_only_what_it_was_blocked_after_it_began():
  now = FakeTime()
  meter = StallMeter(warmup_steps=0, clock=now)
  # Blocked longer than the step has run (the request came before it began): the part inside it.
  meter.begin_step()
  now.advance(0.25)
  meter._mark_ready(blocked=2.0)
  now.advance(0.25)
  meter.end_step()
  assert meter.wait_s == 0.25 and meter.step_s == 0.5
  # Blocked less than the time to the batch: only the blocked time (the rest was the engine's).
  meter.begin_step()
  now.advance(0.5)
  meter._mark_ready(blocked=0.125)
  meter.end_step()
  assert meter.wait_s == 0.375 and meter.step_s == 1.0
  # No batch asked for within the step: no wait.
  meter.begin_step()
  now.advance(0.5)
  meter.end_step()
  assert meter.wait_s == 0.375 and meter.step_s == 1.5


@pytest.mark.slow
def test_probe_times_the_pipeline_only_and_keeps_elements():
  meter = StallMeter()
  slow = tf.data.Dataset.range(3).map(lambda i: (sleep_op(tf.cast(i, tf.float32), 0.2), i))
  slow_blocked = []
  for x, y in meter.attach(slow):
    assert float(x) == float(y)
    slow_blocked.append(meter._blocked)
  # A sleep lasts at least its time, however loaded the machine.
  assert len(slow_blocked) == 3 and min(slow_blocked) >= 0.195
  assert meter.probes == 3  # Once per batch.
  # Prefetched batches are ready when asked for: however long the consumer
  # takes between batches, the probe sees (next to) no blocking; far less
  # than the slow pipeline's, however loaded the machine.
  fast = tf.data.Dataset.range(4).map(lambda i: (tf.cast(i, tf.float32), i)).prefetch(4)
  it = iter(meter.attach(fast))
  next(it)
  fast_blocked = []
  for _ in range(3):
    time.sleep(0.2)
    next(it)
    fast_blocked.append(meter._blocked)
  assert max(fast_blocked) < 0.5 * min(slow_blocked), (fast_blocked, slow_blocked)


def test_a_batch_fetched_before_the_step_began_waited_zero():
  now = FakeTime()
  meter = StallMeter(warmup_steps=0, clock=now)
  meter._mark_ready(blocked=0.5)  # A device prefetcher fetched it ahead.
  now.advance(1.0)
  meter.begin_step()
  now.advance(0.25)
  meter.end_step()
  assert meter.steps == 1 and meter.step_s == 0.25 and meter.wait_s == 0.0
