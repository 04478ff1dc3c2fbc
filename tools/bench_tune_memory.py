"""python tools/bench_tune_memory.py [--trials 40] [--keep_trial_graphs] [--out_dir DIR]

Shows that a keras-tuner search through audioclf.tune keeps its memory flat:
runs a random search of short trials on generated tone data and prints the
process's resident memory (RSS, psutil) after each trial, then the growth.
Each trial builds a new model and new datasets. Clearing the Keras session
before each build is not enough, on either stack: every traced train step
also leaves its graph in TensorFlow's gradient registry, which audioclf.tune
empties after each trial (compat.forget_trial_gradients); --keep_trial_graphs
skips that, to show the difference. About 2 minutes on 2 CPU cores.

Measured (2 cores; RSS after trials 1 / half / last):
  TF 2.15, Keras 2, 40 trials:
    audioclf.tune             564 / 657 /  663 MB   (second half: +0.5 MB a trial)
    --keep_trial_graphs       564 / 806 / 1021 MB   (second half: +10.6 MB a trial)
  TF 2.21, Keras 3, 30 trials:
    audioclf.tune             740 / 826 /  843 MB   (second half: +1.25 MB a trial)
    --keep_trial_graphs       740 / 878 / 1000 MB   (second half: +8.45 MB a trial)
The rise over the first trials is the allocator growing to the largest
model and batch drawn so far; it stops once those have all come up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import soundfile as sf  # pylint: disable=g-import-not-at-top,wrong-import-position

from audioclf import compat  # pylint: disable=g-import-not-at-top,wrong-import-position
from audioclf.params import Params  # pylint: disable=g-import-not-at-top,wrong-import-position

from audioclf.tuning import search as tune_lib  # noqa: E402
from audioclf.tuning import trials as trials_lib  # noqa: E402
from audioclf.tuning import tuners as tuners_lib  # noqa: E402


def write_tones(root: str, per_label: int = 12, sample_rate: int = 16000) -> str:
  """<root>/<label>/spk<i>_nohash_0.wav: a noisy sine per label, 0.5 s each."""
  rng = np.random.default_rng(0)
  t = np.arange(sample_rate // 2) / sample_rate
  for k, label in enumerate(("low", "mid", "high")):
    os.makedirs(os.path.join(root, label), exist_ok=True)
    for i in range(per_label):
      x = 0.5 * np.sin(2 * np.pi * 300.0 * 2.2 ** k * (1 + 0.02 * i) * t)
      x += 0.05 * rng.standard_normal(t.shape)
      sf.write(os.path.join(root, label, f"spk{i:03d}{label}_nohash_0.wav"),
               x.astype(np.float32), sample_rate, subtype="PCM_16")
  return root


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=40)
  parser.add_argument("--out_dir", default=None, help="default: a temporary folder, removed")
  parser.add_argument("--keep_trial_graphs", action="store_true",
                      help="leave each trial's graphs registered, as TensorFlow does by default")
  args = parser.parse_args()
  if args.keep_trial_graphs:
    compat.forget_trial_gradients = lambda keep: None

  out_dir = args.out_dir or tempfile.mkdtemp(prefix="bench_tune_memory_")
  shutil.rmtree(os.path.join(out_dir, "tune"), ignore_errors=True)  # A fresh search each run.
  params = Params(data_dir=write_tones(os.path.join(out_dir, "data")),
                  cache_dir=os.path.join(out_dir, "cache"), tune_dir=os.path.join(out_dir, "tune"),
                  validation_percent=30.0, clip_seconds=0.5, model_args={"width": 16}, batch_size=16,
                  tuner="random", max_trials=args.trials, trial_steps=10, trial_epochs=2)
  rss_start = tuners_lib._rss_mb()  # pylint: disable=protected-access
  summary = tune_lib.tune(params, verbose=0)
  rows = trials_lib.read_trials(params.tune_dir)

  print(f"RSS before the search (TensorFlow imported): {rss_start:.0f} MB")
  print(f"{'trial':>5}  {'model':6}  {'width':>5}  {'batch':>5}  {'seconds':>7}  {'RSS MB':>7}")
  for r in rows:
    print(f"{r['trial']:>5}  {r['model']:6}  {r['width']:>5}  {r['batch_size']:>5}  "
          f"{r['seconds']:7.1f}  {r['rss_mb']:7.0f}")
  rss = np.array([r["rss_mb"] for r in rows])
  # The first trials grow the allocator's pools to the largest model and batch
  # drawn so far; a leak shows as growth that goes on in the second half.
  half = len(rss) // 2
  slope = np.polyfit(np.arange(half, len(rss)), rss[half:], 1)[0] if len(rss) > 3 else np.nan
  result = {"trials": len(rows), "keep_trial_graphs": args.keep_trial_graphs,
            "rss_start_mb": round(rss_start), "rss_after_first_mb": round(rss[0]),
            "rss_after_half_mb": round(rss[half - 1]), "rss_after_last_mb": round(rss[-1]),
            "rss_max_mb": round(rss.max()), "growth_second_half_mb": round(rss[-1] - rss[half - 1]),
            "slope_second_half_mb_per_trial": round(float(slope), 2),
            "wall_seconds": summary["wall_seconds"]}
  print(json.dumps(result))
  if not args.out_dir:
    shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())
