"""A streaming detector's quality: false accepts per hour on audio with no keyword, false rejects of keywords placed at known times, the DET curve.

  curve = det_curve(background_probabilities, background_seconds,
                    keyword_probabilities, placed, make_detector, thresholds)
  point = choose_threshold(curve, target_false_accepts_per_hour=1.0)

Every count runs the same Detector (smoothing, threshold, refractory period)
that `audioclf listen` runs, over per-hop probabilities computed once.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Callable, Optional, Sequence

import numpy as np

from audioclf.streaming import detector as detector_lib
from audioclf.streaming import model as streaming

THRESHOLDS = tuple(np.round(np.concatenate([np.arange(0.05, 0.95, 0.025),
                                            np.arange(0.95, 1.0, 0.005)]), 4))


@dataclasses.dataclass(frozen=True)
class Placed:
  """A keyword clip placed into a stream."""
  start: float  # Seconds from the stream's start.
  end: float
  label: str
  snr_db: Optional[float] = None  # Its RMS against the background's where it lies, if set.


def stream_probabilities(stream: streaming.StreamingModel, audio: np.ndarray) -> np.ndarray:
  """The streaming model's probabilities [hops, classes] over `audio`, its last hop padded."""
  stream.reset()
  hops = -(-len(audio) // streaming.HOP_SAMPLES)
  audio = np.pad(np.asarray(audio, np.float32), (0, hops * streaming.HOP_SAMPLES - len(audio)))
  return np.stack([stream.fast_step(hop[None]).numpy()[0]
                   for hop in audio.reshape(hops, streaming.HOP_SAMPLES)])


def detections(probabilities: np.ndarray, detector: detector_lib.Detector) -> list:
  """The detections `detector` makes on per-hop probabilities [hops, classes]."""
  return [d for p in probabilities for d in detector.update(p)]


def false_accepts_per_hour(count: int, seconds: float) -> float:
  """Detections per hour of audio in which no keyword was spoken."""
  return count * 3600.0 / seconds


def false_reject_rate(found: Sequence, placed: Sequence[Placed], latency: float) -> float:
  """The share of `placed` keywords missed: their label not fired from their start to end + latency."""
  if not placed:
    return float("nan")
  missed = sum(not any(d.label == p.label and p.start <= d.time <= p.end + latency for d in found)
               for p in placed)
  return missed / len(placed)


def match(found: Sequence, placed: Sequence[Placed], latency: float) -> tuple[int, int]:
  """(keywords found, detections elsewhere) of one stream's detections.

  A detection finds the first placed keyword of its label, not yet found,
  between whose start and end + latency it falls; every other detection (the
  wrong word, a second one of a word, or none there) is one elsewhere: the
  false detections of a stream that holds keywords.
  """
  taken, elsewhere = set(), 0
  for d in found:
    hit = next((i for i, p in enumerate(placed) if i not in taken and p.label == d.label
                and p.start <= d.time <= p.end + latency), None)
    if hit is None:
      elsewhere += 1
    else:
      taken.add(hit)
  return len(taken), elsewhere


def det_curve(background: np.ndarray, background_seconds: float, keywords: np.ndarray,
              placed: Sequence[Placed], make_detector: Callable[[float], detector_lib.Detector],
              latency: float, thresholds: Sequence[float] = THRESHOLDS) -> list[dict]:
  """False accepts per hour and false-reject rate at each threshold.

  Args:
    background: per-hop probabilities on audio with no keyword.
    background_seconds: that audio's length.
    keywords: per-hop probabilities on audio with `placed` keywords in it.
    placed: where the keywords are.
    make_detector: a fresh Detector at a threshold.
    latency: how long after a keyword's end its detection still counts (the
      model's window: the word is in it that long).
    thresholds: the operating points to measure.
  """
  curve = []
  for threshold in thresholds:
    accepts = len(detections(background, make_detector(threshold)))
    found = detections(keywords, make_detector(threshold))
    curve.append({"threshold": float(threshold), "false_accepts": accepts,
                  "false_accepts_per_hour": false_accepts_per_hour(accepts, background_seconds),
                  "false_reject_rate": false_reject_rate(found, placed, latency)})
  return curve


def choose_threshold(curve: Sequence[dict], target_false_accepts_per_hour: float
                     ) -> Optional[dict]:
  """The point of fewest false rejects whose false accepts per hour meet the target; None if none does.

  Of points with as few false rejects, the one of fewest false accepts, then
  the highest threshold: where the measurement tells them apart no further,
  the most margin against the false accepts it is too short to count (on
  new voices and noise, a word confused for another).
  """
  within = [p for p in curve if p["false_accepts_per_hour"] <= target_false_accepts_per_hour]
  if not within:
    return None
  return min(within, key=lambda p: (p["false_reject_rate"], p["false_accepts_per_hour"],
                                    -p["threshold"]))


def place_keywords(background: np.ndarray, clips: Sequence[tuple[np.ndarray, str]],
                   spacing: float, sample_rate: int, snr_db: Optional[Sequence[float]] = None,
                   seed: int = 0) -> tuple[np.ndarray, list[Placed]]:
  """Keyword clips added into background audio (looped as needed), one every `spacing` seconds.

  Args:
    background: the audio with no keyword.
    clips: (samples, label) of each keyword.
    spacing: seconds from one clip's centre to the next.
    sample_rate: the audio's.
    snr_db: (low, high): each clip scaled to an SNR drawn uniformly from it,
      its RMS against the background's over the same samples (as training
      mixes noise, --noise_snr_db); None adds each clip at its own level.
    seed: the SNRs' draws.

  Returns:
    (the audio, where each clip went). The first starts after `spacing`, so
    that the model's window is full of background when it comes.
  """
  step = int(spacing * sample_rate)
  total = step * (len(clips) + 1)
  loops = -(-total // max(1, len(background)))
  audio = np.tile(np.asarray(background, np.float32), loops)[:total].copy()
  draws = np.random.default_rng(seed).uniform(*(snr_db or (0, 0)), len(clips))
  placed = []
  for i, (clip, label) in enumerate(clips):
    start = step * (i + 1) - len(clip) // 2
    clip = np.asarray(clip[:total - start], np.float32)
    if snr_db is not None:
      clip = clip * np.float32(_rms(audio[start:start + len(clip)]) / _rms(clip)
                               * 10 ** (draws[i] / 20))
    audio[start:start + len(clip)] += clip
    placed.append(Placed(start / sample_rate, (start + len(clip)) / sample_rate, label,
                         None if snr_db is None else round(float(draws[i]), 2)))
  return audio, placed


def _rms(x: np.ndarray) -> float:
  return max(float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))), 1e-6)


def det_png(curve: Sequence[dict], chosen: Optional[dict], title: str = "") -> bytes:
  """The DET curve as a PNG: false rejects against false accepts per hour, the chosen point marked."""
  # The object API with an Agg canvas: no pyplot state, no display needed.
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  fig = Figure(figsize=(5.5, 4.5), dpi=110, layout="constrained")
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  ax.plot([p["false_accepts_per_hour"] for p in curve],
          [100 * p["false_reject_rate"] for p in curve], marker=".")
  if chosen is not None:
    ax.plot([chosen["false_accepts_per_hour"]], [100 * chosen["false_reject_rate"]], "o",
            color="crimson", label=f"threshold {chosen['threshold']:.3f}")
    ax.legend()
  ax.set_xscale("symlog", linthresh=1.0)
  ax.set_xlabel("false accepts per hour")
  ax.set_ylabel("false rejects (%)")
  ax.grid(True, alpha=0.3)
  if title:
    ax.set_title(title)
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png")
  return buffer.getvalue()
