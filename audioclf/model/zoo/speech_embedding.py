"""Google's pretrained speech embedding with a small head: a keyword classifier for voices it never heard."""

from __future__ import annotations

import re

import tensorflow as tf

from audioclf.compat import keras
from audioclf.model.speech import layers as speech
from audioclf.params import ParamError

layers = keras.layers
HEADS = ("pooled", "conv")
TRAINABLE = "frozen, all, or last<N> (N of the embedding network's 5 blocks, from the end)"


def speech_embedding(waveform: tf.Tensor, params, *, head: str = "pooled", width: int = 64,
                     trainable: str = "frozen", lr_multiplier: float = 0.1,
                     pad_seconds: float = 0.5) -> tf.Tensor:
  """The pretrained front end (SpeechMel, SpeechEmbedding) and a head over its embedding sequence.

  Trained on a very large corpus of speech, the embedding separates words
  across voices that a few thousand training clips never cover; the head
  learns only the words. A 1 s clip gives 3 embeddings of 96 dims.

  Args:
    waveform: float32 audio [batch, clip_samples] at 16 kHz.
    params: the run's Params (sample rate and clip length are checked).
    head: "pooled": the embeddings' mean and max over time, normalized, then
      a ReLU layer of `width` units (width 0: none, a linear classifier of the
      pooled embedding); "conv": a temporal conv of `width` filters (kernel 3)
      over the embeddings, then their mean and max.
    width: units or filters of the head.
    trainable: which of the front end trains: "frozen" (none), "all", or
      "last<N>" (its last N of 5 blocks).
    lr_multiplier: the trained front end's learning rate relative to the head's.
    pad_seconds: silence added before and after the clip, so that some
      embedding windows hold a whole word wherever it sits in the clip (with
      none, 1 s clips give 3 embeddings; with 0.5 s, 16).

  Raises:
    ParamError: a sample rate other than 16 kHz, a clip shorter than one
      embedding's window, an unknown head or trainable.
  """
  blocks = _trainable_blocks(trainable)
  _check(params, head, width, pad_seconds)
  padding = int(round(pad_seconds * speech.SAMPLE_RATE))
  frames = speech.SpeechMel(padding=padding, name="speech_mel")(waveform)
  x = speech.SpeechEmbedding(trainable_blocks=blocks, lr_multiplier=lr_multiplier,
                             name="speech_embedding")(frames)
  # The embedding's dims differ in scale by orders of magnitude: each step is
  # normalized, and the learned scale of each dim sets what it weighs (in the
  # int8 export the layer stays float, so no small dim is rounded away).
  x = layers.LayerNormalization(name="head_norm")(x)
  if head == "conv":
    x = layers.Conv1D(width, 3, padding="same", activation="relu", name="head_conv")(x)
  x = layers.Concatenate(name="head_pool")([layers.GlobalAveragePooling1D(name="head_mean")(x),
                                            layers.GlobalMaxPooling1D(name="head_max")(x)])
  if head == "pooled" and width:
    x = layers.Dense(width, activation="relu", name="head_dense")(x)
  return x


def search_space(hp) -> dict:
  """The tuner's choices: the head, its width, and how much of the front end trains."""
  return {"head": hp.Choice("head", list(HEADS)),
          "width": hp.Choice("width", [0, 64, 128]),
          "trainable": hp.Choice("trainable", ["frozen", "last1", "last2"]),
          "lr_multiplier": hp.Choice("lr_multiplier", [0.03, 0.1, 0.3])}


def _trainable_blocks(trainable: str) -> int:
  """How many blocks a `trainable` names, counted from the end."""
  if trainable == "frozen":
    return 0
  if trainable == "all":
    return len(speech.BLOCK_STARTS)
  match = re.fullmatch(r"last([1-5])", trainable)
  if not match:
    raise ParamError(f"--model_args=trainable={trainable}: speech_embedding takes {TRAINABLE}")
  return int(match.group(1))


def _check(params, head: str, width: int, pad_seconds: float) -> None:
  if head not in HEADS:
    raise ParamError(f"--model_args=head={head}: speech_embedding's heads are {', '.join(HEADS)}")
  if width < 0 or head == "conv" and width == 0:
    raise ParamError(f"--model_args=width={width}: the {head} head needs "
                     f"{'a positive' if head == 'conv' else 'a non-negative'} width")
  if params.sample_rate != speech.SAMPLE_RATE:
    raise ParamError(f"--model=speech_embedding: the pretrained front end takes 16 kHz audio, "
                     f"not --sample_rate={params.sample_rate} (set --sample_rate=16000: audioclf "
                     "resamples every file as it decodes it)")
  if pad_seconds < 0:
    raise ParamError(f"--model_args=pad_seconds={pad_seconds}: must be 0 or more")
  padded = params.clip_samples + 2 * int(round(pad_seconds * speech.SAMPLE_RATE))
  if speech.num_embeddings(speech.num_frames(padded)) < 1:
    shortest = (speech.WINDOW_FRAMES - 1) * speech.HOP_SAMPLES + speech.FRAME_SAMPLES
    raise ParamError(f"--clip_seconds={params.clip_seconds}: the speech embedding sees "
                     f"{shortest / speech.SAMPLE_RATE:.3f} s at once; give clips (with pad_seconds on each side) at least that long")
