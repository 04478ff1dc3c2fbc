"""From per-hop class probabilities to detections: smoothing, a threshold, a refractory period per label.

The operating point (threshold, smoothing) that `audioclf evaluate
--background` chose is kept in <model_dir>/detector.json, which `audioclf
listen` and the streaming export read.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
from typing import Optional, Sequence

import numpy as np

from audioclf import files

SETTINGS_FILE = "detector.json"
BACKGROUND_LABELS = ("_silence_", "_unknown_", "silence", "unknown")  # Never detections.
DEFAULT_THRESHOLD = 0.5
DEFAULT_SMOOTHING_HOPS = 3
# What rests after a detection: every keyword (a word's tail, still in the window, can sound
# like another word: "stop" like "up"), or only the label that fired.
REFRACTORY_LABELS = ("all", "each")


@dataclasses.dataclass(frozen=True)
class Detection:
  time: float  # Seconds from the stream's start to the end of the hop that fired.
  label: str
  score: float  # The smoothed probability that crossed the threshold.


class Detector:
  """Smooths each label's probability over the last hops and reports where it crosses the threshold.

  Args:
    labels: the model's labels, in its output order.
    threshold: the smoothed probability a label must reach.
    smoothing_hops: hops in the moving average (1: none).
    refractory_hops: after a detection, hops before a label fires again (a
      word stays in the model's window for many hops).
    hop_seconds: a hop's length, for the detections' times.
    warmup_hops: hops whose window still reaches before the stream's start:
      they fire nothing.
    background: labels that never fire.
    refractory_labels: "all": every label rests after any detection; "each":
      only the label that fired.
  """

  def __init__(self, labels: Sequence[str], threshold: float, smoothing_hops: int,
               refractory_hops: int, hop_seconds: float, warmup_hops: int = 0,
               background: Sequence[str] = BACKGROUND_LABELS, refractory_labels: str = "all"):
    if not 0 < threshold <= 1:
      raise ValueError(f"the threshold must be in (0, 1], not {threshold}")
    if smoothing_hops < 1 or refractory_hops < 0:
      raise ValueError("smoothing_hops must be at least 1 and refractory_hops at least 0")
    if refractory_labels not in REFRACTORY_LABELS:
      raise ValueError(f"refractory_labels must be one of {REFRACTORY_LABELS}, not "
                       f"{refractory_labels}")
    self.refractory_labels = refractory_labels
    self.labels = list(labels)
    self.threshold, self.hop_seconds = float(threshold), float(hop_seconds)
    self.refractory_hops, self.warmup_hops = int(refractory_hops), int(warmup_hops)
    self.smoothing_hops = int(smoothing_hops)
    self._keywords = np.array([label not in set(background) for label in self.labels])
    self._recent = collections.deque(maxlen=int(smoothing_hops))
    self._next_allowed = np.zeros(len(self.labels), np.int64)
    self.hops = 0

  def update(self, probabilities: np.ndarray) -> list[Detection]:
    """The detections of one more hop's probabilities [classes]."""
    hop, self.hops = self.hops, self.hops + 1
    self._recent.append(np.asarray(probabilities, np.float64))
    if hop < self.warmup_hops:
      return []
    smoothed = np.mean(self._recent, axis=0)
    fired = self._keywords & (smoothed >= self.threshold) & (hop >= self._next_allowed)
    if fired.any():
      rests = fired if self.refractory_labels == "each" else self._keywords
      self._next_allowed[rests] = hop + 1 + self.refractory_hops
    return [Detection(time=round((hop + 1) * self.hop_seconds, 3), label=self.labels[i],
                      score=round(float(smoothed[i]), 4)) for i in np.flatnonzero(fired)]


def read_settings(model_dir: str) -> Optional[dict]:
  """The operating point kept in model_dir (threshold, smoothing_hops, ...), or None."""
  path = os.path.join(model_dir, SETTINGS_FILE)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def write_settings(model_dir: str, settings: dict) -> str:
  """Keeps an operating point in model_dir (written whole, then renamed); returns its path."""
  path = os.path.join(model_dir, SETTINGS_FILE)
  files.atomic_write(path, (json.dumps(settings, indent=2) + "\n").encode())
  return path
