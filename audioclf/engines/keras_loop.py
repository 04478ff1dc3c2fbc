"""The Keras training loop: the one `model.fit` that the Keras engine, every tuner trial and the benchmarks run.

  meter, clock = StallMeter(), StepClock(warmup_steps=10)
  history = keras_loop.fit(model, meter.attach(dataset), steps_per_epoch=100, epochs=3,
                           meter=meter, clocks=[clock], train_steps=300)

Around fit it puts what every run needs: the stall meter's callback (its
probe must already be on the dataset: `StallMeter.attach`, or per worker for
a distributed dataset, as `engines.common.metered_train_input` does), step
clocks, a stop at the global `train_steps` (an epoch resumed off the epoch
grid would overshoot it) or when a clock's time budget runs out, a save at
each epoch's end, and TensorBoard. What differs between callers (the
strategy, where checkpoints go, which task writes) stays with the caller; the
differences between Keras 2 and 3 stay in audioclf.compat.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Callable, Iterator, Optional, Sequence

from audioclf import compat
from audioclf.compat import keras
from audioclf.engines.clock import StepClock
from audioclf.engines.stall import KerasStallCallback, StallMeter


class _Steps(keras.callbacks.Callback):
  """Times steps on the clocks, stops at train_steps or a clock's budget, saves at each epoch's end."""

  def __init__(self, clocks: Sequence[StepClock], train_steps: Optional[int],
               save: Optional[Callable[[int], None]]):
    super().__init__()
    self._clocks, self._train_steps, self._save = list(clocks), train_steps, save

  def _step(self) -> int:
    return int(self.model.optimizer.iterations.numpy())

  def on_train_batch_begin(self, batch, logs=None):
    for clock in self._clocks:
      clock.begin_step()

  def on_train_batch_end(self, batch, logs=None):
    for clock in self._clocks:
      clock.end_step()
    # fit still evaluates and ends this epoch, so the last checkpoint is saved.
    if any(clock.stop for clock in self._clocks) or (
        self._train_steps is not None and self._step() >= self._train_steps):
      self.model.stop_training = True

  def on_epoch_end(self, epoch, logs=None):
    if self._save is not None:
      self._save(self._step())


def fit(model: keras.Model, dataset, *, steps_per_epoch: int, epochs: int = 1,
        initial_epoch: int = 0, meter: Optional[StallMeter] = None,
        clocks: Sequence[StepClock] = (), train_steps: Optional[int] = None,
        save: Optional[Callable[[int], None]] = None, stall_log_dir: Optional[str] = None,
        stall_log_every: int = 50, tensorboard_dir: Optional[str] = None,
        tensorboard_update_freq="epoch", validation_data=None,
        validation_steps: Optional[int] = None,
        callbacks: Sequence[keras.callbacks.Callback] = (),
        first_callbacks: Sequence[keras.callbacks.Callback] = (),
        verbose=0) -> keras.callbacks.History:
  """Trains `model` (compiled) on `dataset` with model.fit, the way every audioclf run does.

  Args:
    model: a compiled model (models.compile_model).
    dataset: the training batches, repeated (input_fn's are), with `meter`'s
      probe attached where a meter is given.
    steps_per_epoch, epochs, initial_epoch: as model.fit's; each epoch ends
      with a validation pass (where validation_data is given) and a save.
    meter: the input-stall meter whose probe is on `dataset`; its fraction
      goes into each batch's logs as "input_stall", and to `stall_log_dir`
      as the summary input/stall_fraction every `stall_log_every` steps.
    clocks: step clocks to time every training step with; a clock with a
      time budget (StepClock.max_seconds) ends the run once it is spent.
    train_steps: stop once the optimizer's step (the global step) gets here.
    save: called with the global step at the end of every epoch (a checkpoint).
    tensorboard_dir: where Keras' TensorBoard callback writes, its batch
      summaries stepped by the global step on resume (compat.TensorBoard).
    validation_data, validation_steps, verbose: as model.fit's.
    callbacks: more callbacks (keras-tuner's, a benchmark's), after these.
    first_callbacks: callbacks before all of these (one that fills an epoch's
      logs, as a validation of another model does, before TensorBoard writes them).

  Returns:
    fit's History. Its input pipelines are gone by then (`passes_released`).
  """
  loop = [*first_callbacks, _Steps(clocks, train_steps, save)]
  if meter is not None:
    # Validation runs between batches, outside the steps the meter times.
    loop.append(KerasStallCallback(meter, stall_log_dir, every_steps=stall_log_every))
  if tensorboard_dir:
    loop.append(compat.TensorBoard(tensorboard_dir, update_freq=tensorboard_update_freq))
  compat.build_optimizer(model)  # Under the caller's strategy scope, as the model was made.
  with passes_released():
    return model.fit(
        dataset,
        steps_per_epoch=steps_per_epoch,
        initial_epoch=initial_epoch,
        epochs=epochs,
        validation_data=validation_data,
        validation_steps=validation_steps,
        callbacks=loop + list(callbacks),
        shuffle=False,  # input_fn shuffles; Keras 3 warns that a dataset ignores shuffle=True.
        verbose=verbose)


@contextlib.contextmanager
def passes_released() -> Iterator[None]:
  """Around Keras' fit or evaluate: the tf.data iterators they leave behind are destroyed on exit.

  Keras keeps each pass's iterator in a generator that refers back to its
  owner (Keras 3's TFEpochIterator and its _enumerate_iterator). A pass that
  ends before its data does (fit stopped at train_steps, evaluate at the end
  of a dataset of unknown length) leaves that generator suspended, so the
  pair and the iterator (its threads, its buffers of batches) go only in a
  full collection, whenever the process next runs one, which may be long
  (destroying an iterator can wait for its autotuning thread: data/batches.py's AUTOTUNE).

  So: a collection on exit, right after the pass. Everything older is frozen
  out of it (gc.freeze), so it walks only what the pass made.
  A process that froze its objects itself (a forking server, the tuner's
  search) keeps them frozen; the collection then walks what came since.
  """
  frozen_here = not gc.get_freeze_count()
  if frozen_here:
    gc.freeze()
  try:
    yield
  finally:
    gc.collect()
    if frozen_here:
      gc.unfreeze()
