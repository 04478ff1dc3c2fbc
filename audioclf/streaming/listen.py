"""Keyword spotting on a stream: a streaming model hop by hop, its detections handed to a callback."""

from __future__ import annotations

import time
from typing import Callable, Iterable

import numpy as np

from audioclf.streaming import detector as detector_lib
from audioclf.streaming import model as streaming

STOPPED_END = "end of input"
STOPPED_INTERRUPTED = "interrupted"
STOPPED_CLOSED = "output closed"


def listen(stream: streaming.StreamingModel, hops: Iterable[np.ndarray],
           detector: detector_lib.Detector,
           emit: Callable[[detector_lib.Detection], None]) -> dict:
  """Runs `stream` on every hop and `emit` on each detection, until the hops or the output end.

  Ctrl-C (KeyboardInterrupt) and a closed output (BrokenPipeError from
  `emit`) end the stream as its end does: what was heard is summarized.

  Args:
    stream: the streaming model, reset here.
    hops: float32 arrays [streaming.HOP_SAMPLES].
    detector: turns each hop's probabilities into detections.
    emit: called with each detection, as it happens.

  Returns:
    A summary: hops, seconds of audio, detections, why it stopped, and the
    median microseconds a hop took the model (the first one compiles it).
  """
  stream.reset()
  stopped, detections, model_seconds = STOPPED_END, 0, []
  try:
    for hop in hops:
      began = time.perf_counter()
      probabilities = stream.fast_step(np.asarray(hop, np.float32)[None]).numpy()[0]
      model_seconds.append(time.perf_counter() - began)
      for detection in detector.update(probabilities):
        detections += 1
        emit(detection)
  except KeyboardInterrupt:
    stopped = STOPPED_INTERRUPTED
  except BrokenPipeError:
    stopped = STOPPED_CLOSED
  hops_heard = detector.hops
  return {"hops": hops_heard, "seconds": round(hops_heard * detector.hop_seconds, 2),
          "detections": detections, "stopped": stopped,
          "us_per_hop": round(1e6 * float(np.median(model_seconds)), 1) if model_seconds else None}


def make_detector(stream: streaming.StreamingModel, settings: dict) -> detector_lib.Detector:
  """A Detector for `stream` at {threshold, smoothing_hops, refractory_seconds, refractory_labels, background_labels}."""
  hop_seconds = streaming.HOP_SAMPLES / stream.sample_rate
  refractory = settings.get("refractory_seconds")
  if refractory is None:
    refractory = stream.window_samples / stream.sample_rate  # A word stays that long in the window.
  return detector_lib.Detector(
      stream.labels, settings.get("threshold", detector_lib.DEFAULT_THRESHOLD),
      settings.get("smoothing_hops", detector_lib.DEFAULT_SMOOTHING_HOPS),
      int(round(refractory / hop_seconds)), hop_seconds, stream.warmup_hops,
      settings.get("background_labels", detector_lib.BACKGROUND_LABELS),
      settings.get("refractory_labels", detector_lib.REFRACTORY_LABELS[0]))
