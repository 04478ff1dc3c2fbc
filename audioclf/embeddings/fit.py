"""What an engine fits with --embedding_views: the head view on cached embeddings, or why not, in one line.

The head view shares the model's layers and its optimizer (so its step is
the global step, and the checkpoint of the model holds all), and each
evaluation is the full model's on raw audio, as a run from audio reports it.
`cut` is what both engines share; `plan` is the Keras engine's fit, and
embeddings/estimator.py the Estimator engine's.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from audioclf import compat
from audioclf.compat import keras
from audioclf.data import manifest as manifest_lib
from audioclf.embeddings import batches
from audioclf.embeddings import boundary as boundary_lib
from audioclf.embeddings import table as table_lib
from audioclf.model import losses
from audioclf.params import ParamError, Params


@dataclasses.dataclass(frozen=True)
class Cut:
  """Where a model's frozen front end ends, and the train split's table of its output."""

  boundary: boundary_lib.Boundary
  table: table_lib.Table


@dataclasses.dataclass(frozen=True)
class HeadFit:
  """The head view, compiled with the model's optimizer, and the table it trains on."""

  head: keras.Model
  table: table_lib.Table
  params: Params

  def dataset(self, first_batch: int) -> tf.data.Dataset:
    """Training batches from `first_batch` on (`batches.dataset`)."""
    return batches.dataset(self.params, self.table, first_batch)

  @staticmethod
  def validation(evaluate: Callable[[], dict]) -> keras.callbacks.Callback:
    """A callback that gives each epoch's logs val_loss and val_accuracy from `evaluate()`."""
    return _Validation(evaluate)


class _Validation(keras.callbacks.Callback):
  """Each epoch's validation, by the full model on raw audio, into the logs fit records.

  First of the callbacks (keras_loop.fit's first_callbacks): TensorBoard,
  keep best and early stopping read them after it, fit's History last.
  """

  def __init__(self, evaluate: Callable[[], dict]):
    super().__init__()
    self._evaluate = evaluate

  def on_epoch_end(self, epoch, logs=None):
    results = self._evaluate()
    if logs is not None:
      logs.update({f"val_{name}": results[name] for name in ("loss", "accuracy")})


def cut(params: Params, model: keras.Model, manifest: manifest_lib.Manifest,
        distributed: bool = False) -> Optional[Cut]:
  """The cut of `model` (built, its front end's weights in) and its table; None: train from audio.

  None where --embedding_views is 0, or (with a warning naming the reason)
  where the run cannot train from embeddings. The table is read from the
  cache, or embedded now and written there.

  Args:
    params: the run's parameters.
    model: build_model's model.
    manifest: the loaded data manifest.
    distributed: the run trains on several replicas or cluster tasks.

  Raises:
    ParamError: a batch larger than the train split.
  """
  if not params.embedding_views:
    return None
  found = boundary_lib.find(model)
  reason = found if isinstance(found, str) else _why_not(params, distributed)
  if reason:
    logging.warning("audioclf: --embedding_views=%d: training from audio, as %s",
                    params.embedding_views, reason)
    return None
  table = table_lib.load_or_embed(params, found, manifest)
  if table.skipped:
    logging.warning("audioclf: --embedding_views=%d: training from audio, as the train split "
                    "has files skipped as bad", params.embedding_views)
    return None
  if params.batch_size > len(table.labels):
    raise ParamError(f"--batch_size={params.batch_size}: must be at most {len(table.labels)}, "
                     "the examples of the 'train' split")
  logging.info("audioclf: training the head on %s embeddings (%d clips x %d views) in %s",
               "new" if table.embedded else "cached", len(table.labels), table.views, table.base)
  return Cut(found, table)


def plan(params: Params, model: keras.Model, manifest: manifest_lib.Manifest,
         distributed: bool = False) -> Optional[HeadFit]:
  """The Keras engine's head fit for `model` (compiled, restored); None: from audio (`cut`).

  Raises:
    ParamError: a batch larger than the train split.
  """
  found = cut(params, model, manifest, distributed)
  if found is None:
    return None
  head = found.boundary.head_view()
  compat.build_optimizer(model)  # Its slots for the model's variables, which the head's are.
  head.compile(optimizer=model.optimizer,
               loss=losses.loss(params, manifest.label_counts("train")),
               metrics=[losses.accuracy(params)])
  return HeadFit(head, found.table, params)


def _why_not(params: Params, distributed: bool) -> str:
  """Why a run with a frozen front end still trains from audio ("" where nothing stops it)."""
  if params.mixup_alpha:
    return "--mixup_alpha mixes clips and their labels, which the cached views do not"
  if params.tail_prob:
    return "--tail_prob relabels word tails _unknown_, which the cached views do not"
  if params.data_service:
    return "--data_service serves clips, not embeddings"
  if distributed:
    return ("each replica or cluster task would need its own share of the table (one device "
            "trains from it)")
  return ""
