"""The input-stall meter: how much of each training step waits for its batch, in both engines.

One mechanism serves both engines. A probe at the very end of the dataset runs
inside the step's own `get_next`: a timestamp is taken just before the
pipeline's last buffer (prefetch) is asked for the batch, and another just
after it hands the batch over, so their difference is the time the step spent
blocked on input, and nothing else (not the engine's dispatch, not its
callbacks). The engine marks when each step begins and ends (a Keras
callback, or an Estimator SessionRunHook); a step's wait is that blocked time,
capped at the part of it after the step began, and the stall fraction is the
summed waits over the summed step times. The probe is one Python call and
three tiny ops per batch, not per example, which no training step notices.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from audioclf.compat import keras
from audioclf.compat import private
from audioclf.engines.clock import StepClock


class StallMeter:
  """Accumulates per-step input waits; thread-safe, cheap, engine-agnostic.

  Args:
    warmup_steps: steps left out at the start (and after each `reset`). The
      first step of a run traces and builds the step function (or the
      session's graph), which is no input wait; a benchmark may skip more.
    clock: the time source its StepClock reads (None: the StepClock's own
      default, the real time); a test passes a fake one that advances exactly.
  """

  def __init__(self, warmup_steps: int = 1, clock: Optional[Callable[[], float]] = None):
    self._lock = threading.Lock()
    self._ready: Optional[float] = None
    self._blocked = 0.0
    # Times the steps the waits are a share of; its clock stamps the ready batches, too.
    self.clock = StepClock(warmup_steps) if clock is None else StepClock(warmup_steps, clock=clock)
    self.reset()

  def reset(self) -> None:
    with self._lock:
      self.wait_s = 0.0
      self.clock.reset()
      self.probes = 0  # Batches that passed the probe: 0 means the dataset was never attached.
      self._window_wait = self._window_step = 0.0

  @property
  def steps(self) -> int:
    """Steps measured (after the warm-up)."""
    return self.clock.steps

  @property
  def step_s(self) -> float:
    """Their summed seconds."""
    return self.clock.seconds

  # --- Called by the dataset probe (a tf.data thread).
  def _mark_ready(self, blocked=0.0) -> np.int64:
    self._ready, self._blocked = self.clock.now(), float(blocked)
    self.probes += 1
    return np.int64(0)

  # --- Called by the engine around each step (the training thread).
  def begin_step(self) -> None:
    self.clock.begin_step()
    self._ready, self._blocked = None, 0.0

  def end_step(self) -> None:
    """Ends the step `begin_step` began; a no-op when none is open (it already ended)."""
    begin = self.clock.began
    seconds = self.clock.end_step()
    if seconds is None:  # None open, or a warm-up step.
      return
    # Only blocked time inside this step counts: a batch fetched before the
    # step began (ready < begin, as a device prefetcher does) waited zero.
    ready = self._ready if self._ready is not None else begin
    wait = min(max(min(self._blocked, ready - begin), 0.0), seconds)
    with self._lock:
      self.wait_s += wait
      self._window_wait += wait
      self._window_step += seconds

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
    """Returns `dataset` with the probe around its last transformation; elements are unchanged."""
    # zip asks its inputs in order, in the caller's get_next: the first
    # stamps the request, the second is the pipeline itself. tf.timestamp is
    # a TF op, so the request costs no Python call.
    requests = private.inline_map(tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat(),
                           lambda _: tf.timestamp())

    def probe(requested, element):
      blocked = tf.timestamp() - requested
      marked = tf.numpy_function(self._mark_ready, [blocked], tf.int64, stateful=True)
      with tf.control_dependencies([marked]):
        return tf.nest.map_structure(tf.identity, element)

    options = tf.data.Options()
    # The probe must run in the consumer's get_next: no prefetch may be
    # injected after it. (map_parallelization never touches it, as its
    # function is stateful; leaving that option alone leaves the pipeline's
    # own maps as the pipeline set them.)
    options.experimental_optimization.inject_prefetch = False
    return private.inline_map(tf.data.Dataset.zip((requests, dataset)), probe).with_options(options)


class KerasStallCallback(keras.callbacks.Callback):
  """Marks Keras fit's steps for a StallMeter and logs the stall fraction.

  The scalar `input/stall_fraction` (the share of the last `every_steps`
  steps) goes to `log_dir` at global steps that are multiples of
  `every_steps`, so a resumed run continues the curve.
  """

  def __init__(self, meter: StallMeter, log_dir: Optional[str] = None, every_steps: int = 50):
    super().__init__()
    self.meter, self.every = meter, max(1, every_steps)
    self._writer = tf.summary.create_file_writer(log_dir) if log_dir else None
    self._step = 0

  def on_train_begin(self, logs=None):
    # Read the global step once; counting from it costs no device read per batch.
    optimizer = getattr(self.model, "optimizer", None)
    if optimizer is not None and hasattr(optimizer, "iterations"):
      self._step = int(optimizer.iterations.numpy())

  def on_train_batch_begin(self, batch, logs=None):
    self.meter.begin_step()

  def on_train_batch_end(self, batch, logs=None):
    self.meter.end_step()
    self._step += 1
    if logs is not None:
      logs["input_stall"] = self.meter.fraction
    if self._writer is not None and self._step % self.every == 0:
      with self._writer.as_default():
        tf.summary.scalar("input/stall_fraction", self.meter.window_fraction(), step=self._step)
      self._writer.flush()


class EstimatorStallHook(tf.compat.v1.train.SessionRunHook):
  """Marks Estimator session steps for a StallMeter and logs the stall fraction.

  The Estimator runs its CheckpointSaverHook (and the evaluation a saving
  listener starts) before any training hook's after_run; a trainer that
  evaluates should also end the meter's step in its listener's before_save,
  as audioclf's Estimator engine does. The after_run here is then a no-op.
  """

  def __init__(self, meter: StallMeter, log_dir: Optional[str] = None, every_steps: int = 50):
    self.meter, self.every, self.log_dir = meter, max(1, every_steps), log_dir
    self._writer = None
    self._global_step = None
    self._step = 0

  def begin(self):
    self._global_step = tf.compat.v1.train.get_global_step()
    if self.log_dir:
      self._writer = tf.compat.v1.summary.FileWriterCache.get(self.log_dir)

  def after_create_session(self, session, coord):
    # Read the global step once, after any restore, and count from it: a
    # step's own fetch of it may read the value before the step's increment,
    # and fetching nothing keeps each step's session.run as it was.
    if self._global_step is not None:
      self._step = int(session.run(self._global_step))

  def before_run(self, run_context):
    self.meter.begin_step()

  def after_run(self, run_context, run_values):
    self.meter.end_step()
    self._step += 1
    if self._writer is not None and self._step % self.every == 0:
      summary = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(
          tag="input/stall_fraction", simple_value=self.meter.window_fraction())])
      self._writer.add_summary(summary, self._step)

  def end(self, session):
    # Without a SummarySaverHook (no save_summary_steps) nothing else flushes this writer.
    if self._writer is not None:
      self._writer.flush()
