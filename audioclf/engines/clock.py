"""The step clock: the one timer of training steps, for both engines, the tuner and the benchmarks.

  clock = StepClock(warmup_steps=10)
  clock.begin_step(); ...; clock.end_step()   # what the engine's step hook calls
  clock.steps_per_sec(), clock.examples_per_sec(batch_size)

Only the time between `begin_step` and `end_step` counts, so evaluation,
checkpoints and graph building between steps never dilute the figure. The
first `warmup_steps` are left out: they trace the step function, start thread
pools and fill the input pipeline's buffers (the Estimator's first ten steps
run at a third of its speed). The input-stall meter (audioclf.engines.stall) times
its steps with one of these, too. Keras runs drive clocks from
audioclf.engines.keras_loop, Estimators from `EstimatorClockHook`.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import tensorflow as tf


class StepClock:
  """Sums the seconds of training steps after a warm-up; can ask a run to stop after some.

  Args:
    warmup_steps: steps left out at the start (and after `reset`).
    max_seconds: when > 0, `stop` turns True once this many seconds of
      measured steps have passed (a benchmark's time budget) ...
    min_steps: ... and at least this many steps were measured.
    keep_durations: keep every step's seconds, warm-up included, in `durations`
      (a benchmark's closer look; a training run does not keep them).
    clock: the time source, seconds as a float; a test passes a fake one that
      advances exactly.
  """

  def __init__(self, warmup_steps: int = 0, max_seconds: float = 0.0, min_steps: int = 0,
               keep_durations: bool = False, clock: Callable[[], float] = time.perf_counter):
    self._warmup_steps = max(0, warmup_steps)
    self.max_seconds, self.min_steps = max_seconds, min_steps
    self._keep = keep_durations
    self.now = clock  # The one place the clock (and a StallMeter with it) reads the time.
    self.began: Optional[float] = None  # now() at the open step's begin; None between steps.
    self.reset()

  def reset(self) -> None:
    self.seconds = 0.0  # Summed seconds of the measured steps.
    self.steps = 0  # Measured steps (after the warm-up).
    self.first_step_s: Optional[float] = None  # The very first step's seconds (traces, starts up).
    self.durations: list[float] = []
    self._warmup = self._warmup_steps

  def begin_step(self) -> None:
    self.began = self.now()

  def end_step(self) -> Optional[float]:
    """Ends the open step: its seconds where it counts; None in the warm-up or with no step open.

    A no-op without an open step, so two hooks may both end the same step.
    """
    if self.began is None:
      return None
    elapsed, self.began = self.now() - self.began, None
    if self.first_step_s is None:
      self.first_step_s = elapsed
    if self._keep:
      self.durations.append(elapsed)
    if self._warmup > 0:
      self._warmup -= 1
      return None
    self.seconds += elapsed
    self.steps += 1
    return elapsed

  @property
  def stop(self) -> bool:
    """Whether max_seconds of measured steps (and min_steps) have passed."""
    return bool(self.max_seconds) and self.steps >= self.min_steps and (
        self.seconds >= self.max_seconds)

  def steps_per_sec(self) -> Optional[float]:
    return self.steps / self.seconds if self.steps and self.seconds > 0 else None

  def examples_per_sec(self, batch_size: int) -> Optional[float]:
    rate = self.steps_per_sec()
    return None if rate is None else rate * batch_size


def training_clock(steps_to_run: int, warmup_steps: int = 10) -> StepClock:
  """The clock an engine reports examples/s with: a short run still gets a figure (skips at most half)."""
  return StepClock(warmup_steps=min(warmup_steps, steps_to_run // 2))


class EstimatorClockHook(tf.compat.v1.train.SessionRunHook):  # tf.estimator's, on every stack.
  """Times an Estimator's training steps on `clocks`; stops training once a clock's budget is spent."""

  def __init__(self, clocks: Sequence[StepClock]):
    self._clocks = list(clocks)

  def before_run(self, run_context):
    for clock in self._clocks:
      clock.begin_step()

  def after_run(self, run_context, run_values):
    for clock in self._clocks:
      clock.end_step()  # A no-op where a saving listener already ended it.
    if any(clock.stop for clock in self._clocks):
      run_context.request_stop()
