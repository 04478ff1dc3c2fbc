"""tools/bench_streaming.py: its table's ratios and verdicts are those of the values it prints."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import bench_streaming  # noqa: E402  pylint: disable=wrong-import-position


def test_each_runtime_is_judged_against_its_own_sliding_window():
  rows = [{"row": name, "us_per_hop": us, "rtf": us / 80000} for name, us in (
      ("streaming (TF)", 500.0), ("sliding window (TF)", 2000.0),
      ("streaming (TFLite)", 100.0), ("sliding window (TFLite)", 1000.0))]
  text, verdict = bench_streaming.table(rows)
  assert verdict == {"TF": {"ratio": 0.25, "met": False}, "TFLite": {"ratio": 0.1, "met": True}}
  assert "| streaming (TF) | 500 | " in text and " | 0.250 |" in text
  assert "TF 0.250, MISSED; TFLite 0.100, met." in text
