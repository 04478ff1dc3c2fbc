"""The input-stall meter inside both engines: metrics.json, TensorBoard, and evaluation kept out of steps."""

import glob
import json
import os

import pytest
import tensorflow as tf

from audioclf.compat import keras
from audioclf.engines.stall import EstimatorStallHook, StallMeter
from conftest import ENGINES, TRAIN_STEPS, FakeTime

TAG = "input/stall_fraction"


def _scalars(log_dir, tag):
  """{step: value} of scalar `tag` in log_dir's event files (TF1 simple values or TF2 tensors)."""
  found = {}
  for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == tag:
          kind = value.WhichOneof("value")
          found[event.step] = (value.simple_value if kind == "simple_value"
                               else float(tf.make_ndarray(value.tensor)))
  return found


@pytest.mark.parametrize("engine", ENGINES)
def test_metrics_json_has_the_stall_fraction(trained, engine):
  params, metrics = trained(engine)
  with open(os.path.join(params.model_dir, "metrics.json")) as f:
    saved = json.load(f)
  assert isinstance(saved["input_stall_fraction"], float)
  assert 0.0 <= saved["input_stall_fraction"] <= 1.0
  assert metrics["input_stall_fraction"] == saved["input_stall_fraction"]


@pytest.mark.parametrize("engine, log_dir", [
    ("keras", "train"), pytest.param("estimator", "", marks=pytest.mark.legacy_only)])
def test_stall_fraction_is_logged_with_the_training_summaries(trained, engine, log_dir):
  params, _ = trained(engine)
  values = _scalars(os.path.join(params.model_dir, log_dir), TAG)
  # Every log_every_steps global steps, as the loss curves are.
  every = params.log_every_steps
  assert sorted(values) == list(range(every, TRAIN_STEPS + 1, every))
  assert all(0.0 <= v <= 1.0 for v in values.values())


def _dataset():
  ds = tf.data.Dataset.range(10**6).map(lambda i: (tf.random.uniform([4]), tf.cast(i % 2, tf.int32)))
  return ds.batch(4).map(lambda x, y: ({"waveform": x}, y)).prefetch(2)


def _model():
  inputs = keras.Input([4], name="waveform")
  m = keras.Model({"waveform": inputs}, keras.layers.Dense(2, activation="softmax")(inputs))
  m.compile(keras.optimizers.legacy.SGD(), "sparse_categorical_crossentropy")
  return m


class _SlowSave(tf.compat.v1.train.CheckpointSaverListener):  # tf.estimator's, on every stack.
  """Stands in for the evaluation train_and_evaluate runs after each checkpoint: 1 s on `now`."""

  def __init__(self, now):
    self.now = now

  def after_save(self, session, global_step_value):
    self.now.advance(1.0)


@pytest.mark.slow
@pytest.mark.legacy_only
@pytest.mark.parametrize("end_before_save, counted", [(True, False), (False, True)])
def test_estimator_evaluation_is_no_training_step(tmp_path, end_before_save, counted):
  # The Estimator runs the checkpoint saver, and the evaluation its listener
  # starts, inside a step, before the training hooks' after_run: only the
  # engine's listener keeps that time out of the meter.
  from audioclf.engines.estimator_engine import _EndStepBeforeSave  # pylint: disable=g-import-not-at-top
  now = FakeTime()  # Moves only in the "evaluation": the steps themselves take no time on it.
  meter = StallMeter(clock=now)
  config = tf.estimator.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=4,
                                  save_summary_steps=None, log_step_count_steps=None)
  est = keras.estimator.model_to_estimator(keras_model=_model(), config=config)
  listeners = [_EndStepBeforeSave([meter])] if end_before_save else []
  est.train(lambda: meter.attach(_dataset()), max_steps=13,
            hooks=[EstimatorStallHook(meter)], saving_listeners=listeners + [_SlowSave(now)])
  assert meter.steps == 12
  # Saves inside steps 4, 8 and 12 (and before the first and after the last, outside any step).
  assert meter.step_s == (3.0 if counted else 0.0)
