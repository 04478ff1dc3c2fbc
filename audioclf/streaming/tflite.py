"""A model_dir's streaming form as TensorFlow Lite: one hop [1, 1280] in, class probabilities out, the state inside.

  <export_dir>/stream.tflite           float
  <export_dir>/stream_dynamic.tflite   int8 weights, float activations
  <export_dir>/stream_int8.tflite      int8 weights and activations but for FLOAT_SCOPES,
                                       calibrated on training clips in the training noise
  <export_dir>/stream.json             sample_rate, hop_samples, labels, threshold, smoothing

int8 keeps SpeechMel float (a power spectrum's 100 dB), the embedding's
first layer with its input, and the head's normalization. The first layer
finds small differences between neighbouring log-mel levels whose common
part, the sound's loudness, is large: in int8 its input moves in steps of
about half a dB and its rounded weights no longer cancel that common part,
an error the layers after it carry to the output, most on broadband noise.
Calibration plays the training clips in the data's background recordings,
as a stream brings them, not clean clips end to end.

The state (the audio tail, each time convolution's earlier inputs, the
peaks, the head's embeddings) lives in TFLite resource variables
(VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE: builtins), so an app calls
invoke() once per hop and keeps nothing itself; a fresh interpreter starts a
fresh stream. Each file is checked against the streaming model hop by hop.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from audioclf import compat
from audioclf.data import decode
from audioclf.data import manifest as manifest_lib
from audioclf.model import model_dir as model_dir_lib
from audioclf.model.speech import layers as speech
from audioclf.params import ParamError
from audioclf.streaming import background, quality
from audioclf.streaming import detector as detector_lib
from audioclf.streaming import model as streaming

FILE_NAMES = {"none": "stream.tflite", "dynamic": "stream_dynamic.tflite",
              "int8": "stream_int8.tflite"}
# The name scopes whose ops int8 keeps in float (the module docstring says why).
FLOAT_SCOPES = re.compile(rf"(^|/)(speech_mel|{speech.layer_scope(0)}|head_norm)(_\d+)?/")
SIDECAR = "stream.json"
CHECK_HOPS = 60  # Hops of test audio each file is checked on: past the head's whole window.


def convert(stream: streaming.StreamingModel, quantize: str = "none",
            calibration: Optional[np.ndarray] = None) -> bytes:
  """The TFLite flatbuffer of `stream.step`, its state in resource variables.

  Args:
    stream: the streaming model.
    quantize: "none", "dynamic" (int8 weights) or "int8" (int8 weights and
      activations, calibrated on `calibration` hops [n, 1280]; FLOAT_SCOPES
      stay float).
    calibration: hops of real audio, for int8.

  Raises:
    ParamError: another quantization, or int8 without calibration hops.
  """
  if quantize not in FILE_NAMES:
    raise ParamError(f"--format=tflite_streaming takes --quantize={', '.join(FILE_NAMES)}, "
                     f"not {quantize}")
  if quantize == "int8" and (calibration is None or not len(calibration)):
    raise ParamError("--quantize=int8 calibrates on the training clips: none were found")
  with tempfile.TemporaryDirectory() as saved:
    converter = _converter(stream, os.path.join(saved, "step"))
    if quantize == "none":
      return converter.convert()
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "dynamic":
      return converter.convert()

    def representative():
      for hop in calibration:
        yield [hop[None].astype(np.float32)]

    converter.representative_dataset = representative
    # TFLite's selective quantization keeps the nodes it is given, named by tensor, in float.
    tensors = compat.tflite_interpreter(_converter(stream, os.path.join(saved, "float")).convert())
    floats = [t["name"] for t in tensors.get_tensor_details() if FLOAT_SCOPES.search(t["name"])]
    if not floats:
      raise ValueError("no SpeechMel tensors in the converted step: int8 cannot keep it float")
    with warnings.catch_warnings():
      # The calibration runs tf.lite's own interpreter, which TF 2.21 calls deprecated.
      warnings.filterwarnings("ignore", message=r"(?s).*tf\.lite\.Interpreter is deprecated")
      debugger = tf.lite.experimental.QuantizationDebugger(
          converter=converter, debug_dataset=representative,
          debug_options=tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=floats))
      return debugger.get_nondebug_quantized_model()


def _converter(stream: streaming.StreamingModel, saved: str) -> tf.lite.TFLiteConverter:
  """A converter of `stream.step` through a SavedModel in `saved`, builtin ops only."""
  # The variables' values now are the flatbuffer's initial state: a stream's start.
  stream.reset()
  # Through a SavedModel: TF 2.15 converts a concrete function's assigned
  # variables to constants, a SavedModel's to resource variables.
  tf.saved_model.save(stream, saved, signatures={"serving_default": stream.step})
  converter = tf.lite.TFLiteConverter.from_saved_model(saved)
  converter.experimental_enable_resource_variables = True
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  return converter


def calibration_hops(stream: streaming.StreamingModel, model_dir: str, clips: int) -> np.ndarray:
  """Hops [n, 1280] of a stream as the model hears one: up to `clips` training clips in the training noise.

  The clips go into the data's background recordings as evaluate --background
  places keywords (background.spacing_seconds apart, at KEYWORD_SNR_DB), so
  that calibration meets the levels a stream's noise sets; without
  recordings, the clips play end to end.
  """
  params = model_dir_lib.read_params(model_dir)
  manifest = manifest_lib.load(params)
  files = manifest.files("train")
  chosen = [files[i] for i in np.linspace(0, len(files) - 1, min(clips, len(files)), dtype=int)]
  audio = [decode.decode_file(e.path, speech.SAMPLE_RATE) for e in chosen]
  noise = [decode.decode_file(e.path, speech.SAMPLE_RATE) for e in manifest.noise]
  if noise and audio:
    audio, _ = quality.place_keywords(np.concatenate(noise), [(a, "") for a in audio],
                                      background.spacing_seconds(stream), speech.SAMPLE_RATE,
                                      background.KEYWORD_SNR_DB)
  else:
    audio = np.concatenate(audio or [np.zeros(0, np.float32)])
  hops = len(audio) // streaming.HOP_SAMPLES
  return audio[:hops * streaming.HOP_SAMPLES].reshape(hops, streaming.HOP_SAMPLES)


def run_hops(model_content: bytes, hops: np.ndarray) -> np.ndarray:
  """A fresh interpreter's probabilities [hops, classes] on hops [n, 1280], one invoke per hop."""
  interpreter = compat.tflite_interpreter(model_content)
  interpreter.allocate_tensors()
  given = interpreter.get_input_details()[0]["index"]
  taken = interpreter.get_output_details()[0]["index"]
  out = []
  for hop in hops:
    interpreter.set_tensor(given, hop[None].astype(np.float32))
    interpreter.invoke()
    out.append(np.array(interpreter.get_tensor(taken)[0]))
  return np.stack(out)


def check_audio(hops: int = CHECK_HOPS, seed: int = 0) -> np.ndarray:
  """Hops [hops, 1280] of tones that come and go over noise (SpeechMel's floor never binds)."""
  rng = np.random.default_rng(seed)
  t = np.arange(hops * streaming.HOP_SAMPLES) / 16000.0
  tones = sum(np.sin(2 * np.pi * f * t) * (0.5 + 0.5 * np.sin(2 * np.pi * r * t))
              for f, r in ((300, 0.7), (900, 1.3), (2100, 0.4)))
  audio = 0.1 * tones + 0.01 * rng.standard_normal(t.size)
  return audio.astype(np.float32).reshape(hops, streaming.HOP_SAMPLES)


def export(model_dir: str, export_dir: Optional[str] = None,
           quantizations: Sequence[str] = ("none", "dynamic"), checkpoint: str = "best",
           calibration_clips: int = 300) -> dict:
  """Writes model_dir's streaming form as TFLite files and stream.json, each checked hop by hop.

  Args:
    model_dir: a speech_embedding model_dir.
    export_dir: default <model_dir>/tflite_streaming.
    quantizations: "none", "dynamic" and/or "int8".
    checkpoint: best, last, or a checkpoint's path.
    calibration_clips: training clips int8 calibrates on.

  Returns:
    {"export_dir", "variants": {name: {"file", "bytes", "max_prob_diff",
    "agreement"}}}: the largest difference from the streaming model over
    CHECK_HOPS hops, and the share of hops whose top label is its.

  Raises:
    ParamError: a model other than speech_embedding, or an unknown quantization.
  """
  stream = streaming.StreamingModel.from_model_dir(model_dir, checkpoint)
  export_dir = export_dir or os.path.join(model_dir, "tflite_streaming")
  os.makedirs(export_dir, exist_ok=True)
  hops = check_audio()
  stream.reset()
  expected = np.stack([stream.step(hop[None]).numpy()[0] for hop in hops])
  variants = {}
  calibration = (calibration_hops(stream, model_dir, calibration_clips)
                 if "int8" in quantizations else None)
  for quantize in quantizations:
    content = convert(stream, quantize, calibration)
    with open(os.path.join(export_dir, FILE_NAMES[quantize]), "wb") as f:
      f.write(content)
    got = run_hops(content, hops)
    variants[quantize] = {"file": FILE_NAMES[quantize], "bytes": len(content),
                          "max_prob_diff": float(np.abs(got - expected).max()),
                          "agreement": float(np.mean(got.argmax(1) == expected.argmax(1)))}
  settings = detector_lib.read_settings(model_dir) or {}
  sidecar = {"sample_rate": stream.sample_rate, "hop_samples": streaming.HOP_SAMPLES,
             "labels": stream.labels,
             "threshold": settings.get("threshold", detector_lib.DEFAULT_THRESHOLD),
             "smoothing_hops": settings.get("smoothing_hops", detector_lib.DEFAULT_SMOOTHING_HOPS),
             "refractory_seconds": stream.window_samples / stream.sample_rate,
             "refractory_labels": settings.get("refractory_labels",
                                               detector_lib.REFRACTORY_LABELS[0]),
             "warmup_hops": stream.warmup_hops,
             "background_labels": list(detector_lib.BACKGROUND_LABELS)}
  with open(os.path.join(export_dir, SIDECAR), "w") as f:
    json.dump(sidecar, f, indent=2)
    f.write("\n")
  return {"export_dir": export_dir, "variants": variants}
