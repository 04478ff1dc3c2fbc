"""Where a model's frozen front end ends: the model that embeds audio, and the head view trained on its output.

A model is cut after its SpeechEmbedding layer where nothing up to it
trains (--model_args=trainable=frozen): what that layer gives is then a pure
function of the clip. The head view is a keras.Model made of the very layer
objects after the cut, called on an input of the cut's shape: a step on it
moves the full model's weights, so the full model's checkpoint, evaluation,
prediction and export need nothing new.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Union

from audioclf.compat import keras
from audioclf.model.speech import layers as speech
from audioclf.model.speech import shipped

INPUT_NAME = "embedding"  # The head view's input.


@dataclasses.dataclass(frozen=True)
class Boundary:
  """The cut of `model` after its layer `index` (model.layers), the last of its frozen front end."""

  model: keras.Model
  index: int

  @property
  def layer(self) -> keras.layers.Layer:
    return self.model.layers[self.index]

  @property
  def shape(self) -> tuple:
    """What the front end gives a clip: [embeddings, dims]."""
    return tuple(int(d) for d in self.layer.output.shape[1:])

  def front_end(self) -> keras.Model:
    """The model's layers up to the cut: raw audio (the model's inputs) -> [batch, *shape]."""
    return keras.Model(self.model.input, self.layer.output, name="frozen_front_end")

  def head_view(self) -> keras.Model:
    """The model's layers after the cut, the same objects, called on [batch, *shape]."""
    start = keras.Input(shape=self.shape, name=INPUT_NAME)
    made = {id(self.layer.output): start}
    for layer in self.model.layers[self.index + 1:]:
      given = layer.input
      made[id(layer.output)] = layer([made[id(t)] for t in given] if isinstance(given, list)
                                     else made[id(given)])
    return keras.Model(start, made[id(self.model.outputs[0])], name="head_view")

  def key_parts(self) -> tuple:
    """What the front end's output depends on: its version, its geometry, its frozen weights.

    The weights are hashed as they are in the model (restored from a
    checkpoint or as shipped): a front end whose weights differ is another.
    """
    weights = hashlib.blake2b(digest_size=16)
    for layer in self.model.layers[:self.index + 1]:
      for weight in layer.weights:
        weights.update(memoryview(weight.numpy()).cast("B"))
    mel = next(layer for layer in self.model.layers if isinstance(layer, speech.SpeechMel))
    return ("speech_embedding", shipped.checksum(), "padding", mel.padding, "blocks_frozen",
            len(speech.BLOCK_STARTS) - self.layer.trainable_blocks, "clip_samples",
            int(self.model.inputs[0].shape[-1]), "weights", weights.hexdigest())


def find(model: keras.Model) -> Union[Boundary, str]:
  """The boundary of `model`'s frozen front end, or why it has none (a phrase)."""
  names = [type(layer).__name__ for layer in model.layers]
  if "SpeechEmbedding" not in names or "SpeechMel" not in names:
    return "its model has no frozen pretrained front end (--model=speech_embedding has)"
  index = names.index("SpeechEmbedding")
  blocks = model.layers[index].trainable_blocks
  if blocks or any(layer.trainable_weights for layer in model.layers[:index + 1]):
    return (f"its front end trains ({blocks} of its {len(speech.BLOCK_STARTS)} blocks): only a "
            "frozen one's output is a function of the clip alone (--model_args=trainable=frozen)")
  boundary = Boundary(model, index)
  after = model.layers[index + 1:]
  made = {id(boundary.layer.output)}
  for layer in after:
    given = layer.input if isinstance(layer.input, list) else [layer.input]
    if not all(id(t) in made for t in given):
      return f"its layer {layer.name} reads more than the front end's output"
    made.add(id(layer.output))
  return boundary
