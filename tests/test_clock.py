"""The step clock and the Keras training loop every Keras run goes through (engine, tuner, benchmarks)."""

import gc

import numpy as np
import tensorflow as tf

from audioclf.engines.clock import StepClock, training_clock
from audioclf.compat import keras
from audioclf.engines import keras_loop
from audioclf.engines.stall import StallMeter
from conftest import FakeTime


def _steps(clock, now, seconds):
  """Runs one step of each of `seconds` on `clock`, whose time source is `now`."""
  for s in seconds:
    clock.begin_step()
    now.advance(s)
    clock.end_step()


def test_clock_leaves_out_the_warmup_and_counts_only_inside_steps():
  now = FakeTime()
  clock = StepClock(warmup_steps=2, keep_durations=True, clock=now)
  _steps(clock, now, [1.0, 0.0, 0.25, 0.25])
  now.advance(1.0)  # Between steps: not counted.
  assert clock.end_step() is None  # No step open: a second hook ending it changes nothing.
  assert clock.steps == 2 and clock.seconds == 0.5
  assert clock.first_step_s == 1.0 and clock.durations == [1.0, 0.0, 0.25, 0.25]
  assert clock.steps_per_sec() == 4.0 and clock.examples_per_sec(8) == 32.0
  clock.reset()
  assert clock.steps == 0 and clock.steps_per_sec() is None and clock.examples_per_sec(8) is None


def test_clock_keeps_no_durations_unless_asked():
  now = FakeTime()
  clock = StepClock(clock=now)
  _steps(clock, now, [0.5])
  assert clock.durations == [] and clock.first_step_s == 0.5 and clock.seconds == 0.5


def test_clock_budget_stops_after_its_seconds_and_min_steps():
  now = FakeTime()
  clock = StepClock(max_seconds=0.5, min_steps=3, clock=now)
  _steps(clock, now, [0.75])
  assert not clock.stop  # Seconds spent, but fewer than min_steps measured.
  _steps(clock, now, [0.0])
  assert not clock.stop
  _steps(clock, now, [0.0])
  assert clock.stop
  exact = StepClock(max_seconds=0.5, clock=now)
  _steps(exact, now, [0.25])
  assert not exact.stop
  _steps(exact, now, [0.25])
  assert exact.stop  # Exactly the budget: spent.
  assert not StepClock().stop  # No budget: never.


def test_training_clock_skips_at_most_half_a_short_run():
  clock = training_clock(steps_to_run=6)
  for _ in range(6):
    clock.begin_step()
    clock.end_step()
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


def _live_iterators():
  """tf.data's eager iterators alive now, garbage not yet collected included (no collection here)."""
  owned = type(iter(tf.data.Dataset.range(1)))
  return sum(isinstance(o, owned) for o in gc.get_objects())


def test_loop_leaves_no_input_iterator_behind():
  # Stopped mid-epoch, with a validation pass: Keras 3 left both iterators in reference
  # cycles, destroyed only by a later full collection, which then waited for their
  # autotuning threads (up to 60 s each once the iterator was a minute old).
  before = _live_iterators()
  keras_loop.fit(_model(), _dataset(), steps_per_epoch=4, epochs=3, train_steps=6,
                 validation_data=_dataset().take(2))
  assert _live_iterators() == before


def test_released_passes_keep_a_freeze_the_caller_made():
  with keras_loop.passes_released():
    assert gc.get_freeze_count() > 0  # What was there is frozen inside.
  assert gc.get_freeze_count() == 0
  gc.freeze()
  try:
    with keras_loop.passes_released():
      pass
    assert gc.get_freeze_count() > 0
  finally:
    gc.unfreeze()


def test_loop_makes_the_optimizers_slots_before_fit_traces_its_step():
  # Made inside the traced step, they would make tf.function trace it a second time.
  model = _model()
  model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy")
  before_the_first_step = []

  class Count(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
      before_the_first_step.append(len(model.optimizer.variables))

  keras_loop.fit(model, _dataset(), steps_per_epoch=1, callbacks=[Count()])
  # Adam's two moments of the kernel and the bias, there before the first step.
  assert before_the_first_step == [len(model.optimizer.variables)]
  assert len(model.optimizer.variables) >= 4
