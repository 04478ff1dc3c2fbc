"""What the Estimator engine fits with --embedding_views: model_to_estimator's, its step the head's.

The Estimator is model_to_estimator's with one change, in its training
graph. There the model is cloned as model_to_estimator clones it (the same
layers and variables, its optimizer stepping the global step, saved through
an object-based saver rooted at the clone), and the clone's head view, not
the clone, takes the step, on a batch of cached embeddings: the clone's
input is a placeholder no op of the step reads. Evaluation, prediction and
export are model_to_estimator's own model_fn on raw audio. So a checkpoint
holds the variables, optimizer slots and keys a run from audio writes, and
the model_dir evaluates, exports and migrates as one. (A model_fn of
audioclf's own, building the head from scratch, would have to rewrite
model_to_estimator's clone, step and saver, and could drift from them.)
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from audioclf import compat
from audioclf.compat import keras, private
from audioclf.embeddings import batches
from audioclf.embeddings import boundary as boundary_lib
from audioclf.embeddings import fit
from audioclf.embeddings import table as table_lib
from audioclf.model import build as models
from audioclf.params import Params

compat.require_estimator()  # Before tf.estimator is first touched: say which stack has it.


@dataclasses.dataclass(frozen=True)
class HeadEstimator:
  """The Estimator whose training step is the head view's, and the table it trains on."""

  estimator: tf.estimator.Estimator
  table: table_lib.Table
  params: Params

  def dataset(self, first_batch: int) -> tf.data.Dataset:
    """Training batches from `first_batch` on (`batches.dataset`), for its input_fn's graph."""
    return batches.dataset(self.params, self.table, first_batch, in_graph=True)


def head(params: Params, model: keras.Model, cut: fit.Cut,
         estimator: tf.estimator.Estimator) -> HeadEstimator:
  """The Estimator of `model`'s head on `cut`'s table, made from model_to_estimator's.

  Args:
    params: the run's parameters.
    model: the compiled model `estimator` was made of (with its first weights).
    cut: `fit.cut` of the model, taken before model_to_estimator (after it the
      eager model can no longer embed).
    estimator: model_to_estimator(model): its model_fn, config and warm start.
  """
  # Read eagerly, as model_to_estimator does: in a graph its variables would be another's.
  optimizer_config = model.optimizer.get_config()
  full = estimator.model_fn

  def model_fn(features, labels, mode, config):
    if mode != tf.estimator.ModeKeys.TRAIN:
      return full(features, labels, mode, config)
    # The clone's input, never fed: the step reads the embeddings alone.
    waveform = tf.compat.v1.placeholder(tf.float32, [None, params.clip_samples])
    loss, train_op, scaffold = private.estimator_head_step(
        model, optimizer_config,
        lambda clone: boundary_lib.find(clone).head_view(tensor=features),
        models.inputs(waveform), labels)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, scaffold=scaffold)

  trains = tf.estimator.Estimator(model_fn, config=estimator.config,
                                  warm_start_from=private.warm_start_settings(estimator))
  return HeadEstimator(trains, cut.table, params)
