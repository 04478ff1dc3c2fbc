"""The search space: audioclf's model builder and input_fn, with the hyperparameters in Params."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import keras_tuner as kt

from audioclf import compat
from audioclf.compat import keras
from audioclf.data import pipeline
from audioclf.data.manifest import Manifest
from audioclf.engines import common as engines_common
from audioclf.engines import keras_loop
from audioclf.engines.clock import StepClock, training_clock
from audioclf.engines.stall import StallMeter
from audioclf.model import build as models
from audioclf.model import registry
from audioclf.params import Params
from audioclf.tuning.trials import MODEL_ARGS


class AudioHyperModel(kt.HyperModel):
  """The search space: audioclf's model builder and input_fn, with the hyperparameters in Params.

  Searched, around the base `params` (whose values are the defaults):

    model_args/*   the model's own space: its module's `search_space(hp)`
                   (audioclf.model.registry), over --model_args where it has none
    batch_size     half, once or twice --batch_size
    learning_rate  --learning_rate / 10 to * 10, log-uniform
    dropout        0.0, 0.1, ... 0.5 (and --dropout)
    optimizer      adam, rmsprop, sgd

  So --batch_size and the model's space set the scale, and with it the cost,
  of the trials. A trial trains trial_steps (its train_steps), evaluating
  after each of trial_epochs epochs; everything else comes from `params`
  unchanged, so a trial is the training run its Params describe.
  """

  def __init__(self, params: Params, manifest: Manifest):
    super().__init__(name="audioclf")
    self.params = params
    self.manifest = manifest
    # The last fit's stall meter, step clock and batch size: what its trial's record reports.
    self.last_fit: Optional[tuple[StallMeter, StepClock, int]] = None

  def trial_params(self, hp: kt.HyperParameters) -> Params:
    """The base params with `hp`'s values; declares the hyperparameters on first use."""
    p = self.params
    args = dict(p.model_args)
    space = registry.resolve(p.model).search_space
    if space is not None:
      with hp.name_scope(MODEL_ARGS):
        args.update(space(hp))
    return p.replace(
        # A trial is a whole training run of trial_steps, evaluated after each
        # epoch: a learning-rate schedule ends within it, and best.flags
        # describes the very run that the best trial was.
        train_steps=steps_per_epoch(p) * p.trial_epochs,
        eval_every_steps=steps_per_epoch(p),
        model_args=args,
        batch_size=hp.Choice("batch_size", _around(p.batch_size), default=p.batch_size),
        learning_rate=hp.Float("learning_rate", p.learning_rate / 10, p.learning_rate * 10,
                               sampling="log", default=p.learning_rate),
        dropout=hp.Choice("dropout", sorted({0.0, 0.1, 0.2, 0.3, 0.4, 0.5, p.dropout}),
                          default=p.dropout),
        optimizer=hp.Choice("optimizer", sorted({"adam", "rmsprop", "sgd", p.optimizer}),
                            default=p.optimizer),
    )

  def build(self, hp: kt.HyperParameters) -> keras.Model:
    # Drop the previous trial's Keras graph, model and layer-name counters
    # before building the next one. (Its traced train step is let go of
    # separately, after the trial: see compat.forget_trial_gradients.)
    compat.clear_session()
    params = self.trial_params(hp)
    # Every trial starts from the same seed, so trials differ by their
    # hyperparameters, not by their luck at initialisation.
    keras.utils.set_random_seed(params.seed)
    model = models.compile_model(models.build_model(params, len(self.manifest.labels)), params,
                                 class_counts=self.manifest.label_counts("train"))
    # The optimizer's slots, made now rather than by the first step: a trial's
    # weights file holds them, and Keras 3 skips restoring an optimizer that
    # has none yet (tuner.load_model, in save_best_model), step count included.
    compat.build_optimizer(model)
    return model

  def fit(self, hp: kt.HyperParameters, model: keras.Model,
          callbacks: Optional[Sequence[keras.callbacks.Callback]] = None,
          epochs: Optional[int] = None, initial_epoch: int = 0, verbose: int = 2,
          **kwargs: Any) -> keras.callbacks.History:
    """Trains `model` on the trial's input_fn: `trial_epochs` epochs of trial_steps in all.

    The datasets are made here, not once for the search: the batch size is a
    property of the dataset, and it is one of the hyperparameters. Hyperband
    passes `epochs` and `initial_epoch` (its rung); the other tuners pass neither.
    """
    del kwargs  # Nothing else is passed: search() is only called by tune().
    params = self.trial_params(hp)
    steps = steps_per_epoch(params)
    callbacks = list(callbacks or [])
    meter, clock = StallMeter(), training_clock(steps_to_run=params.train_steps)
    self.last_fit = (meter, clock, params.batch_size)
    # The trial's input stall goes beside keras-tuner's TensorBoard logs of it.
    boards = [c for c in callbacks if isinstance(c, keras.callbacks.TensorBoard)]
    # A Hyperband trial that continues its parent's model continues its
    # parent's data too, as a resumed training run does, instead of
    # replaying the batches the parent has already trained on.
    train = engines_common.metered_train_input(params, self.manifest, meter,
                                               seed_offset=initial_epoch * steps)
    return keras_loop.fit(
        model,
        train,
        steps_per_epoch=steps,
        epochs=epochs or params.trial_epochs,
        initial_epoch=initial_epoch,
        meter=meter,
        clocks=[clock],
        train_steps=params.train_steps,
        # A point an epoch, beside keras-tuner's epoch summaries.
        stall_log_dir=os.path.join(boards[0].log_dir, "train") if boards else None,
        stall_log_every=steps,
        validation_data=pipeline.input_fn(params, "eval", manifest=self.manifest),
        callbacks=callbacks,
        verbose=verbose)


def _around(value: int) -> list[int]:
  return sorted({max(1, value // 2), value, 2 * value})


def steps_per_epoch(params: Params) -> int:
  return max(1, params.trial_steps // params.trial_epochs)
