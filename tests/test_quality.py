"""A streaming detector's false accepts per hour, false-reject rate, DET curve and chosen threshold, on constructed cases."""

import numpy as np
import pytest

from audioclf.streaming import detector as detector_lib
from audioclf.streaming import quality
from audioclf.streaming.quality import Placed

LABELS = ["_silence_", "yes", "no"]


def make_detector(threshold):
  # A hop of 1 s, no smoothing, no refractory period: each hop over the threshold is a detection.
  return detector_lib.Detector(LABELS, threshold, smoothing_hops=1, refractory_hops=0,
                               hop_seconds=1.0)


def hops(peaks, length=60):
  """Per-hop probabilities [length, 3]: silence, except "yes" at each {hop: probability}."""
  probabilities = np.tile([1.0, 0.0, 0.0], (length, 1))
  for hop, p in peaks.items():
    probabilities[hop] = [1 - p, p, 0.0]
  return probabilities


def test_false_accepts_are_counted_per_hour_of_background():
  assert quality.false_accepts_per_hour(3, 1800.0) == 6.0
  assert quality.false_accepts_per_hour(0, 60.0) == 0.0


def test_a_keyword_is_missed_unless_its_own_label_fires_before_the_latency_runs_out():
  placed = [Placed(1, 2, "yes"), Placed(5, 6, "no"), Placed(9, 10, "yes")]
  found = [detector_lib.Detection(2.5, "yes", 0.9),  # In time: a hit.
           detector_lib.Detection(8.0, "no", 0.9),  # After 6 + 1 s: too late.
           detector_lib.Detection(9.5, "no", 0.9)]  # The wrong word.
  assert quality.false_reject_rate(found, placed, latency=1.0) == pytest.approx(2 / 3)
  assert np.isnan(quality.false_reject_rate(found, [], latency=1.0))


def test_the_det_curve_and_the_threshold_that_meets_a_target():
  # An hour of background in which "yes" reaches 0.6 twice and 0.9 once.
  background = hops({10: 0.6, 20: 0.6, 30: 0.9})
  # Two keywords, at hops 5 and 25, which the model scores 0.8 and 0.97.
  keywords = hops({5: 0.8, 25: 0.97})
  placed = [Placed(4.0, 5.0, "yes"), Placed(24.0, 25.0, "yes")]
  curve = quality.det_curve(background, 3600.0, keywords, placed, make_detector, latency=1.0,
                            thresholds=[0.5, 0.625, 0.75, 0.85, 0.925, 0.99])
  assert [(p["false_accepts_per_hour"], p["false_reject_rate"]) for p in curve] == [
      (3.0, 0.0), (1.0, 0.0), (1.0, 0.0), (1.0, 0.5), (0.0, 0.5), (0.0, 1.0)]
  # As few false rejects: the fewest false accepts, then the highest threshold.
  assert quality.choose_threshold(curve, 3.0)["threshold"] == 0.75
  assert quality.choose_threshold(curve, 1.0)["threshold"] == 0.75
  assert quality.choose_threshold(curve, 0.0)["threshold"] == 0.925
  assert quality.choose_threshold(curve[:2], 0.5) is None


def test_keywords_are_placed_where_the_record_says():
  background = np.full(16000, 0.01, np.float32)
  clip = np.ones(8000, np.float32)
  audio, placed = quality.place_keywords(background, [(clip, "yes"), (clip, "no")], 3.0, 16000)
  assert len(audio) == 3 * 48000 and [p.label for p in placed] == ["yes", "no"]
  for p in placed:
    start, end = int(p.start * 16000), int(p.end * 16000)
    assert np.all(audio[start:end] == np.float32(1.01)) and audio[start - 1] == np.float32(0.01)


def test_the_det_figure_is_a_png():
  curve = [{"threshold": 0.5, "false_accepts_per_hour": 2.0, "false_reject_rate": 0.1},
           {"threshold": 0.9, "false_accepts_per_hour": 0.0, "false_reject_rate": 0.3}]
  assert quality.det_png(curve, curve[1], "title").startswith(b"\x89PNG")


def test_keywords_are_placed_at_the_drawn_snr_against_the_background_where_they_lie():
  rng = np.random.default_rng(0)
  # Background 20 dB louder in its second half: each clip is scaled to the noise it lands on.
  background = rng.normal(0, 0.01, 96000).astype(np.float32)
  background[48000:] *= 10
  clip = np.sin(np.arange(8000) / 5).astype(np.float32)
  clips = [(clip, "yes")] * 3
  audio, placed = quality.place_keywords(background, clips, 2.0, 16000, snr_db=(5.0, 15.0))
  plain, _ = quality.place_keywords(background, clips, 2.0, 16000)
  for p in placed:
    span = slice(int(p.start * 16000), int(p.end * 16000))
    added, noise = audio[span] - plain[span] + clip, plain[span] - clip
    snr = 20 * np.log10(np.sqrt(np.mean(added ** 2)) / np.sqrt(np.mean(noise ** 2)))
    assert 5.0 <= p.snr_db <= 15.0 and snr == pytest.approx(p.snr_db, abs=0.01)
  assert len({p.snr_db for p in placed}) == 3


def test_a_streams_detections_find_keywords_or_count_as_elsewhere():
  placed = [Placed(1, 2, "yes"), Placed(5, 6, "no"), Placed(9, 10, "yes")]
  found = [detector_lib.Detection(2.5, "yes", 0.9),  # Finds the first "yes".
           detector_lib.Detection(2.9, "yes", 0.9),  # A second one of it: elsewhere.
           detector_lib.Detection(5.5, "yes", 0.9),  # The wrong word: elsewhere.
           detector_lib.Detection(20.0, "no", 0.9),  # No keyword there: elsewhere.
           detector_lib.Detection(10.5, "yes", 0.9)]  # Finds the last.
  assert quality.match(found, placed, latency=1.0) == (2, 3)
  assert quality.match([], placed, latency=1.0) == (0, 0)
