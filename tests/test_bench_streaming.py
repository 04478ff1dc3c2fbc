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


def test_the_quality_bench_writes_the_data_as_the_presets_header_says():
  import stream_quality  # pylint: disable=g-import-not-at-top
  header = (Path(__file__).resolve().parents[1] / "flags" / "streaming_speech.flags").read_text()
  header = " ".join(line.lstrip("# ").rstrip("\\ ") for line in header.splitlines())
  assert " ".join(["--out=data/stream_words", *stream_quality.SYNTHESIZE]) in header
  assert " ".join(stream_quality.THRESHOLD_NOISE) in header
  assert (f"--target_false_accepts_per_hour={stream_quality.TARGET_FALSE_ACCEPTS_PER_HOUR}"
          in header)


def test_the_quality_table_judges_each_runtime_against_the_target():
  import stream_quality  # pylint: disable=g-import-not-at-top
  rows = [{"row": "listen (TF)", "found": 0.9, "elsewhere": 2, "false_accepts_per_hour": 6.0,
           "false_reject_rate": 0.1, "speed": 100.0},
          {"row": "TFLite int8", "found": 0.9, "elsewhere": 3, "false_accepts_per_hour": 6.0,
           "false_reject_rate": 0.1, "speed": 100.0}]
  held = {"keywords": 119, "seconds": 600.0, "threshold": 0.9, "smoothing_hops": 3,
          "by_snr": [{"snr_db": [0, 5], "keywords": 20, "found": 0.75}]}
  text, verdict = stream_quality.table(rows, held)
  assert verdict == {"listen (TF)": True, "TFLite int8": False}
  assert "| listen (TF) | 0.900 | 2 | 6.0 | 0.100 | 100 |" in text and "0-5 dB 0.75 (20)" in text
