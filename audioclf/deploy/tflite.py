"""On-device export: a trained model as TensorFlow Lite (float, dynamic-range or int8), checked against itself.

Every variant takes what the SavedModel takes, float32 waveforms [batch,
clip_samples] (batch 1 as allocated; resizable), and returns probabilities
[batch, classes]; the log-mel front end is inside. It converts with TFLite's
builtin ops alone (no Select TF ops): tf.signal.stft becomes RFFT2D and
COMPLEX_ABS, both builtins on TF 2.15 and 2.21. An op without a builtin kernel
stops the export with UnsupportedOpsError naming it.

  none     float32 weights and activations
  dynamic  int8 weights, float activations (no calibration)
  int8     int8 weights and activations, calibrated on training clips, except
           the front end (LogMelSpectrogram or SpeechMel, and the LayerNormalization
           after it), which stays float: a spectrum's magnitudes span over
           100 dB, and an 8-bit linear scale keeps only the loudest bins
           (quantized too, the demo model agreed with itself on 62% of clips);
           the speech embedding's first layer stays float too.
           Its input and output stay float32, so it drops in for the others.

The model converted is the trained one with its mel projection written
banded (BandedLogMelSpectrogram, BandedSpeechMel): each mel band sums its own
few FFT bins instead of multiplying by the whole, mostly zero, matrix, which
would be 41 KB of float constants in every variant, and which the dynamic
variant would quantize (features.banded). Same weights, same outputs (within
float rounding); training keeps the matrix product.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import warnings
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
import tensorflow as tf

from audioclf import compat
from audioclf.compat import keras
from audioclf.data import manifest as manifest_lib
from audioclf.data.pipeline import input_fn
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.model.features import LogMelSpectrogram, banded, banded_product, mel_matrix
from audioclf.model.speech import layers as speech
from audioclf.model.speech import shipped
from audioclf.model.speech.layers import SpeechEmbedding, SpeechMel
from audioclf.params import Params

QUANTIZATIONS = ("none", "dynamic", "int8")
FILE_NAMES = {"none": "model.tflite", "dynamic": "model_dynamic.tflite", "int8": "model_int8.tflite"}
# Layers whose ops the int8 variant keeps in float (see the module docstring): the log-mel
# front ends and the normalization after them.
FLOAT_LAYERS = (LogMelSpectrogram, SpeechMel, keras.layers.LayerNormalization)

_NO_KERNEL = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")


class UnsupportedOpsError(model_dir_lib.ModelDirError):
  """The model holds ops that TensorFlow Lite has no builtin kernel for.

  A ModelDirError: the model_dir holds no model this command can export, and
  the commands end on it in one line (cli.user_error).
  """

  def __init__(self, ops: Sequence[str], detail: str):
    self.ops = list(ops)
    super().__init__(
        f"TensorFlow Lite has no builtin kernel for {', '.join(self.ops)}: the model cannot run "
        f"on-device as it is. Replace the layer that uses it by builtin ops. Converter said: "
        f"{detail}")


class BandedLogMelSpectrogram(LogMelSpectrogram):
  """LogMelSpectrogram with the mel filters stored as (bin, weight) pairs per band (features.banded)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.band_bins, self.band_weights = banded(mel_matrix(
        self.n_mels, self.fft_length // 2 + 1, self.sample_rate, self.fmin, self.upper_hz))

  def _project(self, magnitudes):
    return banded_product(magnitudes, self.band_bins, self.band_weights)


class BandedSpeechMel(SpeechMel):
  """SpeechMel with its mel filters banded (features.banded), as the streaming step applies them."""

  def build(self, input_shape):
    super().build(input_shape)
    self.band_bins, self.band_weights = banded(np.asarray(shipped.weights().mel))

  def call(self, waveform):
    waveform = tf.pad(tf.cast(waveform, tf.float32), [[0, 0], [self.padding, self.padding]])
    decibels = speech.mel_decibels(waveform, self.window, lambda power: banded_product(
        power, self.band_bins, self.band_weights))
    return speech.scaled(decibels, tf.reduce_max(decibels, axis=[-2, -1], keepdims=True))


BANDED = {LogMelSpectrogram: BandedLogMelSpectrogram, SpeechMel: BandedSpeechMel}


def on_device(model):
  """`model` with each mel front end banded (BandedLogMelSpectrogram, BandedSpeechMel), weights copied."""
  def clone(layer):
    cls = BANDED.get(type(layer), type(layer))
    return cls.from_config(layer.get_config())

  copy = keras.models.clone_model(model, clone_function=clone)
  copy.set_weights(model.get_weights())
  return copy


def convert(model, quantize: str = "none",
            calibration: Optional[np.ndarray] = None) -> bytes:
  """The Keras model as a TFLite flatbuffer.

  Args:
    model: a model build_model made, weights loaded.
    quantize: "none", "dynamic" or "int8".
    calibration: float32 [clips, clip_samples], the representative data int8
      calibrates its activation ranges on (a few hundred training clips).

  Returns:
    The .tflite file's bytes.

  Raises:
    UnsupportedOpsError: an op without a builtin TFLite kernel.
    ValueError: an unknown quantize, or int8 without calibration clips.
  """
  if quantize not in QUANTIZATIONS:
    raise ValueError(f"quantize must be one of {QUANTIZATIONS}, got {quantize!r}")
  model = on_device(model)
  converter = converter_of(model)
  if quantize == "none":
    return _convert(converter.convert)
  converter.optimizations = [tf.lite.Optimize.DEFAULT]
  if quantize == "dynamic":
    return _convert(converter.convert)
  if calibration is None or not len(calibration):
    raise ValueError("int8 quantization needs calibration clips")

  def representative():
    for clip in calibration:
      yield [clip[np.newaxis].astype(np.float32)]

  converter.representative_dataset = representative
  # The quantization debugger is TFLite's tool for quantizing all but some
  # nodes ("selective quantization"); its float nodes are named by tensor.
  float_nodes = _float_nodes(model, _convert(converter_of(model).convert))
  options = tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=float_nodes)
  debugger = _convert(lambda: tf.lite.experimental.QuantizationDebugger(
      converter=converter, debug_dataset=representative, debug_options=options))
  return _convert(debugger.get_nondebug_quantized_model)


def converter_of(model) -> tf.lite.TFLiteConverter:
  """A TFLite converter of `model`'s inference function (training=False), builtin ops only.

  From the traced function, frozen (its weights become constants), not
  from_keras_model: that one first saves the whole model as a SavedModel,
  tracing every layer's functions, most of a conversion's time (on TF 2.21,
  Keras 3 exports a SavedModel too). The input keeps its batch dimension
  free (allocated as 1).
  """
  (spec,) = model.inputs  # audioclf's models and the zoo's bodies take one input.
  signature = tf.TensorSpec([None, *spec.shape[1:]], spec.dtype)
  # The model's one input tensor as is: a model built on {"waveform": ...}
  # would take it with Keras 3's structure warning.
  single = keras.Model(spec, model.outputs, name=model.name)
  infer = tf.function(lambda x: single(x, training=False)).get_concrete_function(signature)
  # The function as its own trackable object: the same conversion (a function
  # is frozen, not saved), without the warning that a missing one prints.
  result = tf.lite.TFLiteConverter.from_concrete_functions([infer], infer)
  result.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  return result


def _convert(step: Callable):
  """Runs a converter step; a missing kernel becomes UnsupportedOpsError naming the ops."""
  try:
    # Keras 3 exports through a SavedModel and prints where to stdout, which
    # is this command's table and JSON line. The quantizer's calibration runs
    # tf.lite's own interpreter, which TF 2.21 calls deprecated (we run LiteRT's),
    # and notes that float inputs have no statistics (they are meant to stay float).
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
      warnings.filterwarnings("ignore", message=r"(?s).*tf\.lite\.Interpreter is deprecated")
      warnings.filterwarnings("ignore", message="Statistics for quantized inputs were expected")
      return step()
  except Exception as e:  # The converter's own error class differs between TF versions.
    ops = sorted(set(_NO_KERNEL.findall(str(e))))
    if ops:
      first = next(line for line in str(e).splitlines() if "neither a custom op" in line)
      raise UnsupportedOpsError(ops, first.strip()) from e
    raise


def _float_nodes(model, float_model: bytes) -> list[str]:
  """Tensor names of the float model that belong to FLOAT_LAYERS, for the int8 denylist."""
  names = [layer.name for layer in model.layers if isinstance(layer, FLOAT_LAYERS)]
  if any(isinstance(layer, SpeechEmbedding) for layer in model.layers):
    # Its first layer reads log-mel levels whose shared part (the loudness) 8 bits
    # cannot cancel: quantized, it moved noise's probabilities (docs/streaming.md).
    names.append(speech.layer_scope(0))
  # A name scope may carry a suffix (log_mel_1) where the graph was traced twice.
  inside = re.compile("|".join(rf"(^|/){re.escape(name)}(_\d+)?/" for name in names))
  tensors = [t["name"] for t in compat.tflite_interpreter(float_model).get_tensor_details()]
  nodes = [name for name in tensors if names and inside.search(name)]
  if not nodes:
    raise ValueError(f"found no tensors of the layers {names or 'log_mel'} in the converted "
                     "model: the int8 export cannot keep its front end in float")
  return nodes


class Runner:
  """Runs a .tflite model on batches of waveforms, as model.predict_on_batch does."""

  def __init__(self, model_content: bytes):
    self._interpreter = compat.tflite_interpreter(model_content)
    self._input = self._interpreter.get_input_details()[0]["index"]
    self._output = self._interpreter.get_output_details()[0]["index"]
    self._shape = None

  def __call__(self, waveforms: np.ndarray) -> np.ndarray:
    waveforms = np.ascontiguousarray(waveforms, np.float32)
    if self._shape != waveforms.shape:
      self._interpreter.resize_tensor_input(self._input, waveforms.shape)
      self._interpreter.allocate_tensors()
      self._shape = waveforms.shape
    self._interpreter.set_tensor(self._input, waveforms)
    self._interpreter.invoke()
    return self._interpreter.get_tensor(self._output).copy()


def calibration_clips(params: Params, count: int) -> np.ndarray:
  """`count` training clips as input_fn serves them for training (shuffled, shifted), from the cache.

  Returns:
    float32 [count, clip_samples].
  """
  batches = math.ceil(count / params.batch_size)
  clips = [features["waveform"].numpy()
           for features, _ in input_fn(params, "train").take(batches)]
  return np.concatenate(clips)[:count]


def compare(reference: Callable[[np.ndarray], np.ndarray],
            variants: dict[str, Callable[[np.ndarray], np.ndarray]],
            dataset: Iterable) -> dict[str, dict[str, float]]:
  """Top-1 agreement, largest probability difference and accuracy of each variant vs `reference`.

  Args:
    reference: waveforms -> probabilities (the Keras model).
    variants: name -> waveforms -> probabilities (the TFLite models).
    dataset: ({"waveform": ...}, label ids) batches, as input_fn gives evaluation.

  Returns:
    {"reference": {"accuracy"}, name: {"agreement", "max_prob_diff", "accuracy"}}, and
    "examples" in each.
  """
  counts = {name: {"agree": 0, "correct": 0, "max_diff": 0.0} for name in variants}
  correct, examples = 0, 0
  for features, y in dataset:
    waveforms, y = features["waveform"].numpy(), y.numpy()
    expected = np.asarray(reference(waveforms))
    top = expected.argmax(axis=1)
    correct += int((top == y).sum())
    examples += len(y)
    for name, run in variants.items():
      got = run(waveforms)
      c = counts[name]
      c["agree"] += int((got.argmax(axis=1) == top).sum())
      c["correct"] += int((got.argmax(axis=1) == y).sum())
      c["max_diff"] = max(c["max_diff"], float(np.abs(got - expected).max()))
  if not examples:
    raise ValueError("the check split delivered no examples")
  result = {"reference": {"accuracy": correct / examples, "examples": examples}}
  for name, c in counts.items():
    result[name] = {"agreement": c["agree"] / examples, "max_prob_diff": c["max_diff"],
                    "accuracy": c["correct"] / examples, "examples": examples}
  return result


def export(model_dir: str, export_dir: Optional[str] = None, params: Optional[Params] = None,
           quantize: Sequence[str] = ("none", "int8"), calibration_count: int = 300,
           check_split: str = "test", checkpoint: str = "best") -> dict:
  """Writes model_dir's model as .tflite files, then checks each against the Keras model.

  Args:
    model_dir: a folder either engine trained.
    export_dir: where to write; default <model_dir>/tflite. It receives one
      file per variant (FILE_NAMES), labels.txt and check.json.
    params: parameters to use instead of model_dir's params.json (e.g. the
      data or cache folder).
    quantize: the variants to write, from QUANTIZATIONS.
    calibration_count: training clips int8 calibrates on.
    check_split: the split the check runs on (validation if it is empty).
    checkpoint: best (the one --keep_best kept, where there is one, else the
      latest), last, or a checkpoint's path (model_dir.choose_checkpoint).

  Returns:
    check.json's content: {"model_dir", "checkpoint" (best, last or its
    path), "steps" (the checkpoint's), "export_dir", "split", "keras_accuracy",
    "variants": {name: {"file", "bytes", "size_vs_float", "agreement",
    "max_prob_diff", "accuracy"}}, "targets": {target: bool}}.

  Raises:
    UnsupportedOpsError: an op without a builtin TFLite kernel.
  """
  unknown = [q for q in quantize if q not in QUANTIZATIONS]
  if unknown or not quantize:
    raise ValueError(f"quantize must name some of {QUANTIZATIONS}, got {list(quantize)}")
  chosen = model_dir_lib.choose_checkpoint(model_dir, checkpoint)
  model, params, labels = model_dir_lib.load_model(model_dir, params, chosen.path)
  export_dir = export_dir or os.path.join(model_dir, "tflite")
  os.makedirs(export_dir, exist_ok=True)
  calibration = calibration_clips(params, calibration_count) if "int8" in quantize else None
  contents = {q: convert(model, q, calibration) for q in quantize}
  for q, content in contents.items():
    with open(os.path.join(export_dir, FILE_NAMES[q]), "wb") as f:
      f.write(content)
  with open(os.path.join(export_dir, "labels.txt"), "w") as f:
    f.write("".join(f"{label}\n" for label in labels))

  manifest = manifest_lib.load(params)
  split = check_split if manifest.split(check_split) else "validation"
  checked = compare(models.predict_fn(model), {q: Runner(c) for q, c in contents.items()},
                    input_fn(params, "eval", split=split, manifest=manifest))
  float_bytes = len(contents["none"]) if "none" in contents else None
  variants = {}
  for q, content in contents.items():
    variants[q] = {"file": FILE_NAMES[q], "bytes": len(content),
                   "size_vs_float": round(len(content) / float_bytes, 4) if float_bytes else None,
                   **{k: v for k, v in checked[q].items() if k != "examples"}}
  result = {"model_dir": model_dir, **chosen.record(), "export_dir": export_dir, "split": split,
            "examples": checked["reference"]["examples"],
            "keras_accuracy": checked["reference"]["accuracy"], "variants": variants,
            "targets": targets(variants)}
  with open(os.path.join(export_dir, "check.json"), "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
  return result


def targets(variants: dict[str, dict]) -> dict[str, bool]:
  """The on-device targets the check judges, for the variants present.

  float agrees with Keras on every clip; int8 on >= 98% of them, its accuracy
  within 1 point of float's, its file at most 30% of float's.
  """
  result = {}
  if "none" in variants:
    result["float_agreement_100"] = variants["none"]["agreement"] == 1.0
  if "int8" in variants:
    int8 = variants["int8"]
    result["int8_agreement_98"] = int8["agreement"] >= 0.98
    if "none" in variants:
      result["int8_accuracy_within_1_point"] = int8["accuracy"] >= variants["none"]["accuracy"] - 0.01
      result["int8_size_30_percent"] = int8["size_vs_float"] <= 0.30
  return result


def table(result: dict) -> str:
  """check.json as the table the command prints."""
  lines = [f"{result['split']} split, {result['examples']} clips; Keras accuracy "
           f"{result['keras_accuracy']:.4f}",
           f"{'variant':8s} {'file':22s} {'bytes':>9s} {'vs float':>8s} {'agreement':>9s} "
           f"{'max |dp|':>9s} {'accuracy':>8s}"]
  for name, v in result["variants"].items():
    ratio = "" if v["size_vs_float"] is None else f"{v['size_vs_float']:.2f}"
    lines.append(f"{name:8s} {v['file']:22s} {v['bytes']:9d} {ratio:>8s} {v['agreement']:9.2%} "
                 f"{v['max_prob_diff']:9.2g} {v['accuracy']:8.4f}")
  lines.append("targets: " + ", ".join(f"{k} {'ok' if ok else 'MISSED'}"
                                       for k, ok in result["targets"].items()))
  return "\n".join(lines)
