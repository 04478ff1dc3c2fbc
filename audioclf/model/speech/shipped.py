"""Google's speech embedding as shipped in the pyopen-wakeword wheel: finding it, checking it, reading its weights.

The two TensorFlow Lite files (melspectrogram.tflite, embedding_model.tflite)
are openWakeWord's conversion of Google's speech_embedding module (Apache-2.0;
Lin et al., ICASSP 2020). Only these two are read: the wake word models
beside them in the wheel carry another license. Each file is pinned by its
SHA-256, which is also the front end's version in every key derived from it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import os
import re

import numpy as np

from audioclf import compat
from audioclf.params import ParamError

PACKAGE = "pyopen_wakeword"
EXTRA = "speech"  # pip install 'audioclf[speech]'
MEL_FILE = "melspectrogram.tflite"
EMBEDDING_FILE = "embedding_model.tflite"
SHA256 = {
    MEL_FILE: "96fa0adccb6e8cf95cb14465409a1a2898ee4a96a85bb9ed3c7eb0e68bf163e8",
    EMBEDDING_FILE: "c0aea21eb84a4ce90a08c870da41b7a7173b45269e6a3207c71d67c40f3a59d8",
}
CONV_LAYERS = 20  # model/conv2d .. model/conv2d_19 in the embedding file.


@dataclasses.dataclass(frozen=True)
class Weights:
  """The shipped front end's weights as numpy arrays, in Keras' layouts.

  Attributes:
    window: [512], the analysis window: the mel file's two 512-tap
      convolutions (stride 160) are this window times a DFT's cosines and
      sines (`_window` checks it), so an FFT of windowed frames computes them.
    mel: [257, 32], the power spectrum's mel filters (60-3800 Hz).
    kernels: per conv layer [kh, kw, in, out], batch norm folded in.
    biases: per conv layer [out].
  """
  window: np.ndarray
  mel: np.ndarray
  kernels: tuple
  biases: tuple


def model_file(name: str) -> str:
  """The path of a shipped file, checked against its pinned SHA-256.

  Raises:
    ParamError: the package is not installed (the message names the pip
      extra), or the file is not the one audioclf was checked against.
  """
  spec = importlib.util.find_spec(PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise ParamError(f"the speech embedding's weights ship in the {PACKAGE.replace('_', '-')} "
                     f"package, which is not installed: pip install 'audioclf[{EXTRA}]'")
  path = os.path.join(list(spec.submodule_search_locations)[0], "models", name)
  digest = _sha256(path)
  if digest != SHA256[name]:
    raise ParamError(f"{path}: SHA-256 {digest or 'unreadable'}, not the {SHA256[name][:12]}... "
                     f"audioclf was checked against; reinstall with pip install "
                     f"'audioclf[{EXTRA}]'")
  return path


def checksum() -> str:
  """The front end's version: one SHA-256 over both pinned files' (no file is read)."""
  joined = "".join(SHA256[name] for name in (MEL_FILE, EMBEDDING_FILE))
  return hashlib.sha256(joined.encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def weights() -> Weights:
  """The shipped weights, read once a process (see `Weights`).

  Raises:
    ParamError: see `model_file`.
  """
  mel = _constants(model_file(MEL_FILE))
  window = _window(cosines=mel["convolution1"][:, 0, :, 0], sines=mel["convolution_1"][:, 0, :, 0])
  embedding = _constants(model_file(EMBEDDING_FILE))
  kernels, biases = [], []
  for i in range(CONV_LAYERS):
    kernel, bias = _conv(embedding, i)
    kernels.append(np.transpose(kernel, (1, 2, 3, 0)))  # TFLite's [out, kh, kw, in].
    biases.append(bias)
  return Weights(window=window, mel=mel["Const_3"], kernels=tuple(kernels),
                 biases=tuple(biases))


def _window(cosines: np.ndarray, sines: np.ndarray) -> np.ndarray:
  """The window w of DFT kernels [bins, taps] that are w[n] cos(2 pi k n / N) and w[n] sin(...).

  Raises:
    ValueError: kernels of another shape (then an FFT would not compute them).
  """
  taps = np.arange(cosines.shape[1])
  phase = 2 * np.pi * np.outer(np.arange(cosines.shape[0]), taps) / cosines.shape[1]
  window = cosines[0]  # Bin 0's cosine is 1.
  error = max(np.abs(window * np.cos(phase) - cosines).max(),
              np.abs(np.abs(window * np.sin(phase)) - np.abs(sines)).max())
  if error > 1e-5:
    raise ValueError(f"{MEL_FILE}: its DFT kernels are no windowed DFT (off by {error:.2g})")
  return window.astype(np.float32)


def _conv(tensors: dict[str, np.ndarray], i: int) -> tuple[np.ndarray, np.ndarray]:
  """Conv layer i's kernel and bias from the embedding file's tensor names.

  The converter named each kernel after its layer and each bias after the
  batch norm folded into it; the last layer has no batch norm, so its kernel
  took the suffix "1" and its zero bias the layer's own name.
  """
  layer = "model/conv2d" + (f"_{i}" if i else "")
  if i == CONV_LAYERS - 1:
    return tensors[layer + "/Conv2D1"], tensors[layer + "/Conv2D"]
  norm = re.compile(r"model/batch_normalization" + (f"_{i}" if i else "") + r"/FusedBatchNormV3;")
  bias = [v for k, v in tensors.items() if norm.match(k) and v.ndim == 1]
  if len(bias) != 1:
    raise ValueError(f"{EMBEDDING_FILE}: {len(bias)} biases for {layer}, not one")
  return tensors[layer + "/Conv2D"], bias[0]


def _constants(path: str) -> dict[str, np.ndarray]:
  """Every constant tensor of a TensorFlow Lite file, by name."""
  with open(path, "rb") as f:
    interpreter = compat.tflite_interpreter(f.read())
  found = {}
  for detail in interpreter.get_tensor_details():
    try:
      found[detail["name"]] = np.array(interpreter.get_tensor(detail["index"]))
    except ValueError:
      continue  # An activation: it holds data only while the model runs.
  return found


def _sha256(path: str) -> str:
  try:
    with open(path, "rb") as f:
      return hashlib.sha256(f.read()).hexdigest()
  except OSError:
    return ""
