"""The input-stall meter: how much of each training step waits for its batch, in both engines.

One mechanism serves both engines. A probe at the very end of the dataset, a
sequential map after prefetch, runs inside the step's own `get_next`, right
when the batch leaves the prefetch buffer. The engine marks when each step
begins and ends (a Keras callback, or an Estimator SessionRunHook). The wait
of a step is then `ready - begin`, and the stall fraction is the summed waits
over the summed step times. The probe is one Python call per batch, not per
example, so it costs nothing measurable next to a training step.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

import numpy as np
import tensorflow as tf


class StallMeter:
  """Accumulates per-step input waits; thread-safe, cheap, engine-agnostic."""

  def __init__(self):
    self._lock = threading.Lock()
    self._begin: Optional[float] = None
    self._ready: Optional[float] = None
    self.reset()

  def reset(self) -> None:
    with self._lock:
      self.wait_s = self.step_s = 0.0
      self.steps = 0
      self._warmup = 1
      self._window_wait = self._window_step = 0.0

  # --- Called by the dataset probe (a tf.data thread).
  def _mark_ready(self) -> np.int64:
    self._ready = time.perf_counter()
    return np.int64(0)

  # --- Called by the engine around each step (the training thread).
  def begin_step(self) -> None:
    self._begin, self._ready = time.perf_counter(), None

  def end_step(self) -> None:
    end = time.perf_counter()
    if self._begin is None:
      return
    if self._warmup > 0:
      # A run's first step traces and builds the step function (or the
      # session's graph), which is no input wait; count from the next one.
      self._warmup -= 1
      self._begin = None
      return
    # A step whose batch was ready before it began (ready < begin) waited zero.
    ready = self._ready if self._ready is not None else self._begin
    wait = min(max(ready - self._begin, 0.0), end - self._begin)
    with self._lock:
      self.wait_s += wait
      self.step_s += end - self._begin
      self._window_wait += wait
      self._window_step += end - self._begin
      self.steps += 1
    self._begin = None

  @property
  def fraction(self) -> float:
    """Share of all measured step time spent waiting for input."""
    return self.wait_s / self.step_s if self.step_s > 0 else 0.0

  def window_fraction(self) -> float:
    """Share since the last call (for periodic logging); starts a new window."""
    with self._lock:
      value = self._window_wait / self._window_step if self._window_step > 0 else 0.0
      self._window_wait = self._window_step = 0.0
    return value

  def attach(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Returns `dataset` with the probe after its last transformation."""
    def probe(features, labels):
      marked = tf.numpy_function(self._mark_ready, [], tf.int64, stateful=True)
      with tf.control_dependencies([marked]):
        return tf.nest.map_structure(tf.identity, features), tf.identity(labels)

    options = tf.data.Options()
    # The probe must run in the consumer's get_next: no prefetch may be
    # injected after it, and it must not become a parallel map.
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    return dataset.map(probe).with_options(options)


class KerasStallCallback(tf.keras.callbacks.Callback):
  """Marks Keras fit's steps for a StallMeter and logs the stall fraction."""

  def __init__(self, meter: StallMeter, log_dir: Optional[str] = None, every_steps: int = 50):
    super().__init__()
    self.meter, self.every = meter, max(1, every_steps)
    self._writer = tf.summary.create_file_writer(log_dir) if log_dir else None
    self._step = 0

  def on_train_batch_begin(self, batch, logs=None):
    self.meter.begin_step()

  def on_train_batch_end(self, batch, logs=None):
    self.meter.end_step()
    self._step += 1
    if logs is not None:
      logs["input_stall"] = self.meter.fraction
    if self._writer is not None and self._step % self.every == 0:
      step = self._step
      if self.model is not None and hasattr(self.model.optimizer, "iterations"):
        step = int(self.model.optimizer.iterations.numpy())
      with self._writer.as_default():
        tf.summary.scalar("input/stall_fraction", self.meter.window_fraction(), step=step)
      self._writer.flush()


class EstimatorStallHook(tf.compat.v1.train.SessionRunHook):
  """Marks Estimator session steps for a StallMeter and logs the stall fraction."""

  def __init__(self, meter: StallMeter, log_dir: Optional[str] = None, every_steps: int = 50):
    self.meter, self.every, self.log_dir = meter, max(1, every_steps), log_dir
    self._writer = None
    self._global_step = None

  def begin(self):
    self._global_step = tf.compat.v1.train.get_global_step()
    if self.log_dir:
      self._writer = tf.compat.v1.summary.FileWriterCache.get(self.log_dir)

  def before_run(self, run_context):
    self.meter.begin_step()
    return tf.compat.v1.train.SessionRunArgs(self._global_step)

  def after_run(self, run_context, run_values):
    self.meter.end_step()
    step = int(run_values.results)
    if self._writer is not None and step % self.every == 0:
      summary = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(
          tag="input/stall_fraction", simple_value=self.meter.window_fraction())])
      self._writer.add_summary(summary, step)
