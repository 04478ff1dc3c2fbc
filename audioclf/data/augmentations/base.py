"""What an augmentation is: its Params fields, its streams, its draws and its steps (ops) on a batch."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import tensorflow as tf

from audioclf.data.augmentations.program import Step
from audioclf.data.streams import Streams
from audioclf.params import Params


@dataclasses.dataclass(frozen=True)
class Sources:
  """What a stream's augmentations read besides their draws.

  `recordings` (noise.Recordings) are the background recordings, None for
  white noise; `silence_label` the label id of the _silence_ clips, which
  always get noise, None without any; `rirs` (noise.Recordings from
  audioclf.data.rir) the impulse responses, None for synthetic ones;
  `num_classes` what mixup's soft labels span; `unknown_label` the
  _unknown_ label's id (what word tails become), None without one.
  """
  recordings: Any = None
  silence_label: Optional[int] = None
  rirs: Any = None
  num_classes: Optional[int] = None
  unknown_label: Optional[int] = None


class Batch:
  """One batch while its augmentations are drawn and composed: its shape, labels and number.

  The voice's augmentations share one resampling (speed.py's): `factors` is
  each example's rate, the product of what each contributes (`resample_by`;
  None: nothing is resampled), and `band_limited` the examples whose
  low-pass an FFT of their own already took (`band_limit`).
  """

  def __init__(self, waves: tf.Tensor, labels: tf.Tensor, k, training: bool, streams: Streams):
    self.waves, self.labels, self.training = waves, labels, training
    self.k = tf.cast(k, tf.int64)
    self.size = tf.shape(waves)[:1]
    self.factors: Optional[tf.Tensor] = None
    self.band_limited: Optional[tf.Tensor] = None
    self._streams = streams
    self.drawing: tuple[str, ...] = ()  # The streams of the augmentation being drawn.

  def key(self, name: str) -> tf.Tensor:
    """The key of stream `name` for this batch: only of the augmentation's own streams.

    Raises:
      ValueError: a stream the augmentation being drawn does not declare.
    """
    if name not in self.drawing:
      raise ValueError(f"stream {name!r} is not one of {self.drawing}: an augmentation draws "
                       "from the streams it declares, so no two share a draw")
    return self._streams.key(name, self.k)

  def uniform(self, name: str, rows: int = 1) -> list[tf.Tensor]:
    """`rows` draws per example, each float32 [batch] uniform in [0, 1), from stream `name`."""
    return tf.unstack(tf.random.stateless_uniform(tf.concat([[rows], self.size], 0),
                                                  self.key(name)), num=rows)

  def resample_by(self, factors: tf.Tensor) -> None:
    """Each example's resampling times `factors` ([batch])."""
    self.factors = factors if self.factors is None else self.factors * factors

  def band_limit(self, chosen: tf.Tensor) -> None:
    """The `chosen` examples (bool [batch]) need no low-pass of their own before resampling."""
    self.band_limited = chosen if self.band_limited is None else self.band_limited | chosen


class Augmentation:
  """One augmentation: which Params `fields` configure it, its `streams`, its draws, its steps.

  A subclass sets `name` (as in ORDER), `fields` and `streams`, and says
  when it is `on`; the composition then calls `draw` (every draw it takes,
  from batch.key of its own streams) and `steps` (its ops on the batch, as
  program.Steps) of each one that is on, in ORDER. One that is off adds no
  op to the graph.
  """
  name: str = ""
  fields: tuple[str, ...] = ()
  streams: tuple[str, ...] = ()

  def __init__(self, params: Params, sources: Sources):
    self.params, self.sources = params, sources

  def on(self, training: bool) -> bool:
    """Whether it changes batches of a training (or evaluation) stream."""
    raise NotImplementedError

  def draw(self, batch: Batch) -> Any:
    """Its draws for `batch` (a pure function of the batch's keys); its share of the resampling."""
    del batch

  def steps(self, batch: Batch, draws: Any) -> list[Step]:
    """Its steps on `batch`, given its `draws` and what the voice shares (batch.factors)."""
    raise NotImplementedError

  def mapped(self) -> "Augmentation":
    """This augmentation for a graph that runs on another host (`Sampler.mapped`)."""
    return self


def between(bounds: tuple[float, float], u: tf.Tensor) -> tf.Tensor:
  """u in [0, 1) mapped uniformly onto [low, high]."""
  low, high = bounds
  return low + u * (high - low)
