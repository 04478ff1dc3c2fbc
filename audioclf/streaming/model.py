"""A trained speech_embedding model run hop by hop: 1280 new samples in, class probabilities out.

  stream = StreamingModel.from_model_dir("runs/demo/current/pretrained")
  for hop in hops:                       # float32 [1, 1280] at 16 kHz
    probabilities = stream.fast_step(hop)  # [1, classes]; step: the same, as TFLite converts it

Each hop adds 8 mel frames and one embedding, and only what they add is
computed (kws_streaming's internal-state mode): every time convolution keeps
its last inputs (a time pool needs none: 8 frames pair whole), the mel framing the
audio tail, the head the last N embeddings (N: what the clip model sees,
clip_seconds + 2 pad_seconds). Output k then equals the clip model's, with
pad_seconds=0, on `window(k)` of the stream: the same weights, the same
arithmetic, except SpeechMel's floor (80 dB under the peak), which here takes
the peak of the frames heard so far in the window rather than of all of them.
The floor binds only on near-digital silence beside loud sound.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from audioclf import compat
from audioclf.compat import xla
from audioclf.model import features
from audioclf.model import model_dir as model_dir_lib
from audioclf.model.speech import layers as speech
from audioclf.params import ParamError

HOP_SAMPLES = speech.HOP_SAMPLES * speech.EMBEDDING_HOP  # 1280: one embedding step.
# 352: what a frame shares with the next hop's frames.
TAIL_SAMPLES = speech.FRAME_SAMPLES - speech.HOP_SAMPLES
MODEL = "speech_embedding"


def lag_frames(time_kernels, pools=speech.POOLS) -> int:
  """How far an embedding's first frame lies behind its hop's first frame: 8k - lag for hop k.

  Each conv layer of time kernel t reads t - 1 earlier inputs, each spaced
  by the product of the time pools before it.
  """
  stride, lag = 1, 0
  for i, kernel in enumerate(time_kernels):
    lag += stride * (kernel - 1)
    stride *= pools.get(i, (1, 1))[0]
  if stride != speech.EMBEDDING_HOP:
    raise ValueError(f"the network pools {stride} frames in time, not {speech.EMBEDDING_HOP}")
  return lag


class StreamingModel(tf.Module):
  """A speech_embedding classifier's streaming form: state kept in variables, a hop per `step`.

  Args:
    model: the trained clip model (build_model's, --model=speech_embedding).
    labels: its labels.
    sample_rate: must be 16000.
  """

  def __init__(self, model, labels, sample_rate: int = speech.SAMPLE_RATE):
    super().__init__(name="streaming")
    if sample_rate != speech.SAMPLE_RATE:
      raise ParamError(f"streaming takes {speech.SAMPLE_RATE} Hz audio, not {sample_rate}")
    mel, embedding = model.get_layer("speech_mel"), model.get_layer("speech_embedding")
    self.labels = list(labels)
    self.sample_rate = sample_rate
    self.window_embeddings = int(embedding.output.shape[1])
    self.window_samples = int(model.inputs[0].shape[1]) + 2 * mel.padding
    self.window_frames = speech.num_frames(self.window_samples)
    value = lambda v: tf.constant(np.asarray(v), tf.float32)
    self._window = value(mel.window)
    # The mel filters banded, so that the dynamic-range TFLite export keeps them float.
    self._band_bins, self._band_weights = features.banded(np.asarray(mel.mel))
    self._kernels = [value(k) * embedding.scale for k in embedding.kernels]
    self._biases = [value(b) * embedding.scale for b in embedding.biases]
    self.lag = lag_frames([int(k.shape[0]) for k in self._kernels])
    # The layers after the embedding, as the clip model runs them on its window.
    # An attribute, so that a SavedModel of this module tracks the Keras 2 weights it reads.
    self._head_model = type(model)(embedding.output, model.outputs[0])
    self._head = compat.constant_call(self._head_model)
    self._initial = self._initial_state()
    self._state = {name: tf.Variable(v, trainable=False, name=name)
                   for name, v in self._initial.items()}
    # `step` compiled by XLA where the stack's is fast: a hop is dozens of
    # small ops, whose dispatch costs more than their arithmetic.
    self.fast_step = (tf.function(self.step.python_function, jit_compile=True,
                                  autograph=False) if xla.XLA else self.step)

  def _initial_state(self) -> dict:
    """Each state tensor at the stream's start: silence heard, nothing buffered."""
    state = {"tail": np.zeros((1, TAIL_SAMPLES), np.float32),
             "peaks": np.full((1, self.window_frames), -100.0, np.float32),
             "embeddings": np.zeros((1, self.window_embeddings, speech.DIMS), np.float32)}
    frequency, channels = speech.MEL_BINS + 2, 1
    for i, kernel in enumerate(self._kernels):
      time, width, _, out = kernel.shape
      if time > 1:
        state[f"conv{i}"] = np.zeros((1, time - 1, frequency, channels), np.float32)
        frequency -= width - 1  # A kernel longer than 1 in time reads VALID in both.
      channels = out
      if i in speech.POOLS:
        frequency //= speech.POOLS[i][1]
    return state

  @classmethod
  def from_model_dir(cls, model_dir: str, checkpoint: str = "best") -> "StreamingModel":
    """The streaming form of a model_dir's trained model.

    Raises:
      ParamError: a model other than speech_embedding (see docs/streaming.md).
      ModelDirError: see model_dir.load_model.
    """
    params = model_dir_lib.read_params(model_dir)
    if params.model != MODEL:
      raise ParamError(f"{model_dir}: only --model={MODEL} streams, not --model={params.model} "
                       "(its front end normalizes each clip over all of its frames)")
    model, params, labels = model_dir_lib.load_model(model_dir, params, checkpoint)
    return cls(model, labels, params.sample_rate)

  def window(self, hop: int) -> tuple[int, int]:
    """The stream samples [start, end) that hop `hop`'s output heard (start < 0: warming up).

    The clip model's input is `window_samples` from `start`: a few samples
    more than a whole number of embedding steps, which only its peak sees.
    """
    first_frame = speech.EMBEDDING_HOP * (hop - self.window_embeddings + 1) - self.lag
    start = speech.HOP_SAMPLES * first_frame - TAIL_SAMPLES
    frames = speech.WINDOW_FRAMES + speech.EMBEDDING_HOP * (self.window_embeddings - 1)
    return start, start + (frames - 1) * speech.HOP_SAMPLES + speech.FRAME_SAMPLES

  @property
  def warmup_hops(self) -> int:
    """Hops before the first output whose window lies wholly in the stream."""
    return -(-(-self.window(0)[0]) // HOP_SAMPLES)

  def reset(self) -> None:
    """Back to the stream's start."""
    for name, variable in self._state.items():
      variable.assign(self._initial[name])

  @tf.function(input_signature=[tf.TensorSpec([1, HOP_SAMPLES], tf.float32)])
  def step(self, hop):
    """Class probabilities [1, classes] for the window ending with this hop [1, 1280] of audio."""
    with tf.name_scope("speech_mel"):  # As the clip model's layer: the int8 export keeps it float.
      frames = self._mel_frames(hop)
    embedding = self._embed(frames)
    buffer = tf.concat([self._state["embeddings"][:, 1:], embedding], axis=1)
    self._state["embeddings"].assign(buffer)
    return self._head(buffer)

  def _mel_frames(self, hop):
    """SpeechMel's 8 new frames [1, 8, 32], floored under the peak of the window's frames so far."""
    audio = tf.concat([self._state["tail"], hop], axis=1)
    self._state["tail"].assign(audio[:, -TAIL_SAMPLES:])
    decibels = speech.mel_decibels(audio, self._window, self._project)
    peaks = tf.concat([self._state["peaks"][:, speech.EMBEDDING_HOP:],
                       tf.reduce_max(decibels, axis=-1)], axis=1)
    self._state["peaks"].assign(peaks)
    return speech.scaled(decibels, tf.reduce_max(peaks, axis=-1)[:, None, None])

  def _project(self, power):
    """The mel filters' product with power spectra [..., bins] -> [..., 32], zeros skipped."""
    return features.banded_product(power, self._band_bins, self._band_weights)

  def _embed(self, frames):
    """SpeechEmbedding.call on 8 new frames, each layer's earlier inputs taken from its state."""
    x = frames
    for i in range(len(self._kernels)):
      # Each layer named, so that the int8 export can keep one float, with what it reads.
      with tf.name_scope(speech.layer_scope(i)):
        if i == 0:
          x = tf.pad(tf.expand_dims(x, -1), [[0, 0], [0, 0], [1, 1], [0, 0]])
        x = self._layer(i, x)
    return tf.squeeze(x, axis=2)

  def _layer(self, i: int, x):
    """Embedding layer i on its new inputs (its earlier ones kept in its state), activated and pooled but the last."""
    kernel, bias = self._kernels[i], self._biases[i]
    if kernel.shape[0] > 1:
      x = tf.concat([self._state[f"conv{i}"], x], axis=1)
      self._state[f"conv{i}"].assign(x[:, 1 - kernel.shape[0]:])
    padding = "SAME" if kernel.shape[0] == 1 else "VALID"
    x = tf.nn.conv2d(x, kernel, strides=1, padding=padding) + bias
    if i == len(self._kernels) - 1:
      return x
    x = speech.activation(x)
    if i in speech.POOLS:
      # A hop's 8 frames are the network's whole stride in time: every pool
      # gets whole pairs, the clip network's pairs, and keeps no partial one.
      x = tf.nn.max_pool2d(x, speech.POOLS[i], speech.POOLS[i], padding="VALID")
    return x
