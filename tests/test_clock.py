"""The step clock and the Keras training loop every Keras run goes through (engine, tuner, benchmarks)."""

import time

import numpy as np
import pytest
import tensorflow as tf

from audioclf.engines.clock import StepClock, training_clock
from audioclf.compat import keras
from audioclf.engines import keras_loop
from audioclf.engines.stall import StallMeter


def _steps(clock, seconds):
  for s in seconds:
    clock.begin_step()
    time.sleep(s)
    clock.end_step()


def test_clock_leaves_out_the_warmup_and_counts_only_inside_steps():
  clock = StepClock(warmup_steps=2, keep_durations=True)
  _steps(clock, [0.05, 0.0, 0.01, 0.01])
  time.sleep(0.05)  # Between steps: not counted.
  assert clock.end_step() is None  # No step open: a second hook ending it changes nothing.
  assert clock.steps == 2 and 0.02 <= clock.seconds < 0.04
  assert clock.first_step_s >= 0.05 and len(clock.durations) == 4
  assert clock.examples_per_sec(8) == pytest.approx(8 * clock.steps_per_sec())
  clock.reset()
  assert clock.steps == 0 and clock.steps_per_sec() is None and clock.examples_per_sec(8) is None


def test_clock_budget_stops_after_its_seconds_and_min_steps():
  clock = StepClock(max_seconds=0.02, min_steps=3)
  _steps(clock, [0.03])
  assert not clock.stop  # Seconds spent, but fewer than min_steps measured.
  _steps(clock, [0.0, 0.0])
  assert clock.stop
  assert not StepClock().stop  # No budget: never.


def test_training_clock_skips_at_most_half_a_short_run():
  clock = training_clock(steps_to_run=6)
  _steps(clock, [0.0] * 6)
  assert clock.steps == 3
  assert training_clock(steps_to_run=100)._warmup_steps == 10  # pylint: disable=protected-access


def _model():
  inputs = keras.Input([4], name="x")
  model = keras.Model({"x": inputs}, keras.layers.Dense(2, activation="softmax")(inputs))
  model.compile("sgd", "sparse_categorical_crossentropy")
  return model


def _dataset():
  return tf.data.Dataset.from_tensors(({"x": tf.ones([4, 4])}, tf.zeros([4], tf.int32))).repeat()


def test_loop_stops_at_the_global_step_and_saves_each_epoch(tmp_path):
  model, meter, clock, saved = _model(), StallMeter(), StepClock(), []
  history = keras_loop.fit(model, meter.attach(_dataset()), steps_per_epoch=4, epochs=3,
                           meter=meter, clocks=[clock], train_steps=6, save=saved.append,
                           stall_log_dir=str(tmp_path / "train"), stall_log_every=2,
                           tensorboard_dir=str(tmp_path))
  # Epoch 2 of 3 stops at step 6, mid-epoch, and still saves.
  assert int(model.optimizer.iterations.numpy()) == 6
  assert saved == [4, 6] and len(history.history["loss"]) == 2
  assert clock.steps == 6 and meter.steps == 5 and meter.probes >= 6
  assert tf.io.gfile.glob(str(tmp_path / "train" / "events.out.tfevents.*"))


def test_loop_ends_when_a_clock_budget_is_spent():
  model, clock = _model(), StepClock(max_seconds=1e-9, min_steps=3)
  keras_loop.fit(model, _dataset(), steps_per_epoch=50, clocks=[clock])
  assert int(model.optimizer.iterations.numpy()) == 3


def test_loop_passes_callbacks_after_its_own():
  seen = []

  class Record(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
      seen.append(logs.get("input_stall"))

  meter = StallMeter()
  keras_loop.fit(_model(), meter.attach(_dataset()), steps_per_epoch=3, meter=meter,
                 callbacks=[Record()])
  # The meter's callback ran first and put the stall into each batch's logs.
  assert len(seen) == 3 and all(np.isfinite(v) for v in seen)
