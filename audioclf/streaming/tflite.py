"""A model_dir's streaming form as TensorFlow Lite: one hop [1, 1280] in, class probabilities out, the state inside.

  <export_dir>/stream.tflite           float
  <export_dir>/stream_dynamic.tflite   int8 weights, float activations
  <export_dir>/stream.json             sample_rate, hop_samples, labels, threshold, smoothing

The state (the audio tail, each time convolution's earlier inputs, the
peaks, the head's embeddings) lives in TFLite resource variables
(VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE: builtins), so an app calls
invoke() once per hop and keeps nothing itself; a fresh interpreter starts a
fresh stream. Each file is checked against the streaming model hop by hop.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from audioclf import compat
from audioclf.params import ParamError
from audioclf.streaming import detector as detector_lib
from audioclf.streaming import model as streaming

FILE_NAMES = {"none": "stream.tflite", "dynamic": "stream_dynamic.tflite"}
SIDECAR = "stream.json"
CHECK_HOPS = 60  # Hops of test audio each file is checked on: past the head's whole window.


def convert(stream: streaming.StreamingModel, quantize: str = "none") -> bytes:
  """The TFLite flatbuffer of `stream.step`, its state in resource variables.

  Raises:
    ParamError: a quantization other than none or dynamic.
  """
  if quantize not in FILE_NAMES:
    raise ParamError(f"--format=tflite_streaming: --quantize={quantize} is not offered, only "
                     f"{', '.join(FILE_NAMES)}: calibrated int8 activations cannot hold the "
                     "log-mel's range nor the state's, while dynamic keeps weights in int8")
  # The variables' values now are the flatbuffer's initial state: a stream's start.
  stream.reset()
  # Through a SavedModel: TF 2.15 converts a concrete function's assigned
  # variables to constants, a SavedModel's to resource variables.
  with tempfile.TemporaryDirectory() as saved:
    tf.saved_model.save(stream, saved, signatures={"serving_default": stream.step})
    converter = tf.lite.TFLiteConverter.from_saved_model(saved)
    converter.experimental_enable_resource_variables = True
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize == "dynamic":
      converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


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
           quantizations: Sequence[str] = ("none", "dynamic"), checkpoint: str = "best") -> dict:
  """Writes model_dir's streaming form as TFLite files and stream.json, each checked hop by hop.

  Args:
    model_dir: a speech_embedding model_dir.
    export_dir: default <model_dir>/tflite_streaming.
    quantizations: "none" and/or "dynamic".
    checkpoint: best, last, or a checkpoint's path.

  Returns:
    {"export_dir", "variants": {name: {"file", "bytes", "max_prob_diff"}}}:
    the largest difference from the streaming model over CHECK_HOPS hops.

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
  for quantize in quantizations:
    content = convert(stream, quantize)
    with open(os.path.join(export_dir, FILE_NAMES[quantize]), "wb") as f:
      f.write(content)
    diff = float(np.abs(run_hops(content, hops) - expected).max())
    variants[quantize] = {"file": FILE_NAMES[quantize], "bytes": len(content),
                          "max_prob_diff": diff}
  settings = detector_lib.read_settings(model_dir) or {}
  sidecar = {"sample_rate": stream.sample_rate, "hop_samples": streaming.HOP_SAMPLES,
             "labels": stream.labels,
             "threshold": settings.get("threshold", detector_lib.DEFAULT_THRESHOLD),
             "smoothing_hops": settings.get("smoothing_hops", detector_lib.DEFAULT_SMOOTHING_HOPS),
             "refractory_seconds": stream.window_samples / stream.sample_rate,
             "warmup_hops": stream.warmup_hops,
             "background_labels": list(detector_lib.BACKGROUND_LABELS)}
  with open(os.path.join(export_dir, SIDECAR), "w") as f:
    json.dump(sidecar, f, indent=2)
    f.write("\n")
  return {"export_dir": export_dir, "variants": variants}
