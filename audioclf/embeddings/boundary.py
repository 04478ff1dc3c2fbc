"""Where a model's frozen front end ends: the model that embeds audio, and the head view trained on its output.

A speech_embedding model is cut inside its SpeechEmbedding layer, where its
trained blocks begin (`SpeechEmbedding.frozen_part`): with trainable=frozen
after its last conv, with last<N> before its last N blocks, with all right
after the log-mel. What the cut gives is then a pure function of the clip.
The head view is a keras.Model of the layer's `trained_part` and the very
layer objects after it, called on an input of the cut's shape: a step on it
moves the full model's weights, so the full model's checkpoint, evaluation,
prediction and export need nothing new.
"""

from __future__ import annotations

import hashlib
from typing import Union

from audioclf.compat import keras
from audioclf.model.speech import layers as speech
from audioclf.model.speech import shipped

INPUT_NAME = "embedding"  # The head view's input.


class _Part(keras.layers.Layer):
  """A SpeechEmbedding's frozen_part or trained_part as a layer of its own: the same weights."""

  def __init__(self, embedding: speech.SpeechEmbedding, part: str, **kwargs):
    super().__init__(**kwargs)
    self.embedding, self.part = embedding, part

  def call(self, x):
    return getattr(self.embedding, self.part)(x)


class Boundary:
  """The cut of `model` inside its SpeechEmbedding layer, model.layers[index]."""

  def __init__(self, model: keras.Model, index: int):
    self.model, self.index = model, index
    self.layer = model.layers[index]
    # The model's layers up to the cut: raw audio (the model's inputs) -> [batch, *shape].
    self.front_end = keras.Model(model.input, _Part(self.layer, "frozen_part")(self.layer.input),
                                 name="frozen_front_end")
    self.shape = tuple(int(d) for d in self.front_end.output.shape[1:])

  def head_view(self, tensor=None) -> keras.Model:
    """The model's layers after the cut, the same objects, called on [batch, *shape].

    Args:
      tensor: the tensor its input is, where it is built on one (the
        Estimator's training graph); None: a new Input, as for fit.
    """
    start = keras.Input(shape=self.shape, name=INPUT_NAME, tensor=tensor)
    made = {id(self.layer.output): _Part(self.layer, "trained_part")(start)}
    for layer in self.model.layers[self.index + 1:]:
      given = layer.input
      made[id(layer.output)] = layer([made[id(t)] for t in given] if isinstance(given, list)
                                     else made[id(given)])
    return keras.Model(start, made[id(self.model.outputs[0])], name="head_view")

  def key_parts(self) -> tuple:
    """What the cut's output depends on: the front end's version, geometry and frozen weights.

    The weights are hashed as the model holds them (restored from a
    checkpoint or as shipped): a front end whose weights differ is another.
    """
    weights = hashlib.blake2b(digest_size=16)
    for layer in self.model.layers[:self.index + 1]:
      for weight in layer.non_trainable_weights:
        weights.update(memoryview(weight.numpy()).cast("B"))
    mel = self.model.layers[self.index - 1]
    return ("speech_embedding", shipped.checksum(), "padding", mel.padding, "blocks_frozen",
            len(speech.BLOCK_STARTS) - self.layer.trainable_blocks, "clip_samples",
            int(self.model.inputs[0].shape[-1]), "weights", weights.hexdigest())


def find(model: keras.Model) -> Union[Boundary, str]:
  """The boundary of `model`'s frozen front end, or why it has none (a phrase)."""
  names = [type(layer).__name__ for layer in model.layers]
  index = names.index("SpeechEmbedding") if "SpeechEmbedding" in names else -1
  if index < 1 or names[index - 1] != "SpeechMel":
    return "its model has no pretrained front end to cut (--model=speech_embedding has)"
  if any(layer.trainable_weights for layer in model.layers[:index]):
    return "a layer before its speech embedding trains"
  made = {id(model.layers[index].output)}
  for layer in model.layers[index + 1:]:
    given = layer.input if isinstance(layer.input, list) else [layer.input]
    if not all(id(t) in made for t in given):
      return f"its layer {layer.name} reads more than the front end's output"
    made.add(id(layer.output))
  return Boundary(model, index)
