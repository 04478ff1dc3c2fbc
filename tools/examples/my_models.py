"""A team's own models for audioclf, in a file of their own: nothing in audioclf is edited.

  PYTHONPATH=tools/examples python -m audioclf train --flagfile=tools/examples/my_model.flags

audioclf finds a model by `--model=<module>:<function>`, the module on
PYTHONPATH (see audioclf.model.registry, and docs/your_model.md). What the
function's first parameter is named says what it takes; its keyword-only
arguments, with their types and defaults, are its own hyperparameters
(`--model_args=blocks=3,width=32`), and `search_space(hp)` is what
`audioclf tune` searches of them. Plain Keras, the same file on Keras 2 and 3.
"""

import keras


def tiny(spectrogram, params, *, blocks: int = 3, width: int = 16, kernel: int = 3):
  """A body on audioclf's log-mel front end: conv blocks, then an average over time alone.

  Averaging over time keeps where in frequency the energy sits, which tells
  words apart; a global average would leave 3x3 kernels blind to pitch.

  Args:
    spectrogram: log-mel [batch, frames, n_mels, 1], per clip normalized.
    params: the run's audioclf Params (n_mels, sample_rate, ... if needed).
    blocks: conv blocks, each halving time and frequency.
    width: filters of the first block; each block doubles them.
    kernel: the convolutions' kernel size.

  Returns:
    Pooled features [batch, dims]; audioclf adds dropout and the softmax layer.
  """
  del params
  x = spectrogram
  for i in range(blocks):
    x = keras.layers.Conv2D(width * 2**i, kernel, padding="same", use_bias=False,
                            name=f"tiny{i}_conv")(x)
    x = keras.layers.BatchNormalization(momentum=0.9, name=f"tiny{i}_bn")(x)
    x = keras.layers.ReLU(name=f"tiny{i}_relu")(x)
    x = keras.layers.MaxPool2D(2, padding="same", name=f"tiny{i}_pool")(x)
  x = keras.layers.AveragePooling2D(pool_size=(x.shape[1], 1), name="tiny_time_pool")(x)
  return keras.layers.Flatten(name="tiny_flatten")(x)


def raw(waveform, params, *, filters: int = 16, stride: int = 4):
  """A body that brings its own front end: strided 1-D convolutions on the raw waveform.

  Args:
    waveform: float32 [batch, clip_samples].
    params: the run's audioclf Params.
    filters: filters of each convolution.
    stride: each convolution's stride.

  Returns:
    Pooled features [batch, filters].
  """
  del params
  x = keras.layers.Reshape((-1, 1), name="raw_channel")(waveform)
  for i, kernel in enumerate((64, 16, 8)):
    x = keras.layers.Conv1D(filters, kernel, strides=stride, padding="same", activation="relu",
                            name=f"raw{i}_conv")(x)
  return keras.layers.GlobalAveragePooling1D(name="raw_pool")(x)


def search_space(hp):
  """What `audioclf tune` searches of this module's arguments (keras-tuner's hp)."""
  return {"blocks": hp.Int("blocks", 1, 3), "width": hp.Choice("width", [8, 16, 32])}
