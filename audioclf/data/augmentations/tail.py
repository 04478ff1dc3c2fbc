"""Word tails: a keyword example's window moved on until only the end of its word is left, labelled _unknown_.

On a stream the model's window slides over every word: after the whole word
it holds the word's end alone at its start, which can sound like another
keyword ("stop" ends like "up"). With chance tail_prob a keyword example
(neither _silence_ nor _unknown_) becomes such a window: its content moved
back until a share of its word drawn from tail_keep is left at the start,
silence after it (the noise comes next in ORDER), and its label _unknown_.
The word is where the example is loud: from the first to the last frame
within SPAN_DB of its loudest, before any noise is mixed in.
"""

from __future__ import annotations

import tensorflow as tf

from audioclf.data.augmentations.base import Augmentation, Batch, Sources, between
from audioclf.data.augmentations.program import Step
from audioclf.params import Params

SPAN_DB = 20.0  # A frame this far under the loudest is still the word.
FRAME_SECONDS = 0.01


class Tail(Augmentation):
  """--tail_prob of keyword examples made word tails labelled _unknown_ (--tail_keep of the word).

  Raises:
    ValueError: tail_prob without an _unknown_ class to label the tails.
  """
  name = "tail"
  fields = ("tail_prob", "tail_keep")
  streams = ("tail",)

  def __init__(self, params: Params, sources: Sources):
    super().__init__(params, sources)
    if params.tail_prob and sources.unknown_label is None:
      raise ValueError(f"--tail_prob={params.tail_prob}: labels word tails _unknown_, and the "
                       "data has no _unknown_ class (audioclf synthesize --unknown_words, or "
                       "--wanted_words with --unknown_percent)")

  def on(self, training: bool) -> bool:
    return training and self.params.tail_prob > 0

  def draw(self, batch: Batch) -> tuple[tf.Tensor, tf.Tensor]:
    """(whether each example is picked, the share of its word it keeps)."""
    pick, keep = batch.uniform("tail", 2)
    return pick < self.params.tail_prob, between(self.params.tail_keep, keep)

  def steps(self, batch: Batch, draws: tuple[tf.Tensor, tf.Tensor]) -> list[Step]:
    picked, keep = draws
    background = [l for l in (self.sources.silence_label, self.sources.unknown_label)
                  if l is not None]
    keyword = batch.labels >= 0  # A skipped or padding row (-1) stays as it is.
    for label in background:
      keyword &= tf.not_equal(batch.labels, label)
    frame = max(1, int(round(FRAME_SECONDS * self.params.sample_rate)))
    return [tail_step(picked & keyword, keep, self.sources.unknown_label, frame)]


def word_span(waves: tf.Tensor, frame: int) -> tuple[tf.Tensor, tf.Tensor]:
  """(first sample, end sample) of each example's word: its frames within SPAN_DB of its loudest."""
  n = tf.shape(waves)[1]
  frames = -(-n // frame)
  padded = tf.pad(waves, [[0, 0], [0, frames * frame - n]])
  energy = tf.reduce_mean(tf.square(tf.reshape(padded, [-1, frames, frame])), axis=-1)
  loud = energy >= tf.reduce_max(energy, axis=1, keepdims=True) * 10.0 ** (-SPAN_DB / 10.0)
  first = tf.argmax(tf.cast(loud, tf.int32), axis=1, output_type=tf.int32)
  last = frames - 1 - tf.argmax(tf.cast(loud[:, ::-1], tf.int32), axis=1, output_type=tf.int32)
  return first * frame, tf.minimum((last + 1) * frame, n)


def tails(waves: tf.Tensor, labels: tf.Tensor, chosen: tf.Tensor, keep: tf.Tensor,
          unknown: int, frame: int) -> tuple[tf.Tensor, tf.Tensor]:
  """The `chosen` examples moved back to the last `keep` share of their word, labelled `unknown`."""
  start, end = word_span(waves, frame)
  length = tf.cast(end - start, tf.float32)
  cut = start + tf.cast(tf.round((1.0 - tf.cast(keep, tf.float32)) * length), tf.int32)
  cut = tf.where(chosen, cut, 0)
  n = tf.shape(waves)[1]
  at = tf.range(n)[None, :] + cut[:, None]
  moved = tf.gather(waves, tf.minimum(at, n - 1), batch_dims=1)
  return (tf.where(at < n, moved, tf.zeros([], waves.dtype)),
          tf.where(chosen, tf.cast(unknown, labels.dtype), labels))


def tail_step(chosen: tf.Tensor, keep: tf.Tensor, unknown: int, frame: int) -> Step:
  """`tails` as a Step (it changes labels)."""
  return Step(tails, (chosen, keep), (("unknown", int(unknown)), ("frame", int(frame))),
              labels=True)
