"""python tools/bench_tune_memory.py [--trials 40] [--keep_trial_graphs] [--out_dir DIR] [--measured]

Shows that a keras-tuner search through audioclf.tune keeps its memory flat:
runs a random search of short trials on generated tone data and prints the
process's resident memory (RSS, psutil) after each trial, then the growth.
Each trial builds a new model and new datasets. Clearing the Keras session
before each build is not enough, on either stack: every traced train step
also leaves its graph in TensorFlow's gradient registry, which audioclf.tune
empties after each trial (compat.forget_trial_gradients); --keep_trial_graphs
skips that, to show the difference. About 2 minutes on 2 CPU cores.

The rise over the first trials is the allocator growing to the largest
model and batch drawn so far; it stops once those have all come up, so the
growth that matters is the second half's. With --measured, the table and the
JSON line also go to docs/measured/bench_tune_memory.md and .json
(bench_tune_memory_keep_trial_graphs.* with --keep_trial_graphs: the two
runs side by side), written by tools/measured.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import soundfile as sf  # pylint: disable=g-import-not-at-top,wrong-import-position

from audioclf import compat  # pylint: disable=g-import-not-at-top,wrong-import-position
from audioclf.params import Params  # pylint: disable=g-import-not-at-top,wrong-import-position

from audioclf.tuning import search as tune_lib  # noqa: E402
from audioclf.tuning import trials as trials_lib  # noqa: E402
from audioclf.tuning import tuners as tuners_lib  # noqa: E402
import measured  # noqa: E402  (tools/ is on sys.path when this file runs as a script)


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


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
  """The command line's arguments (default: sys.argv's)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=40)
  parser.add_argument("--out_dir", default=None, help="default: a temporary folder, removed")
  parser.add_argument("--keep_trial_graphs", action="store_true",
                      help="leave each trial's graphs registered, as TensorFlow does by default")
  parser.add_argument("--measured", action="store_true",
                      help="also write the table to docs/measured/ (tools/measured.py)")
  return parser.parse_args(argv)


def search(out_dir: str, trials: int) -> tuple[float, list[dict], float]:
  """A random search of `trials` short trials on tones in out_dir.

  Returns:
    (RSS in MB before it, each trial's row of trials_lib.read_trials, its wall seconds).
  """
  shutil.rmtree(os.path.join(out_dir, "tune"), ignore_errors=True)  # A fresh search each run.
  # 20 clips a label: the training split holds the largest batch the search draws (32).
  params = Params(data_dir=write_tones(os.path.join(out_dir, "data"), per_label=20),
                  cache_dir=os.path.join(out_dir, "cache"), tune_dir=os.path.join(out_dir, "tune"),
                  validation_percent=30.0, clip_seconds=0.5, model_args={"width": 16}, batch_size=16,
                  tuner="random", max_trials=trials, trial_steps=10, trial_epochs=2)
  rss_start = tuners_lib._rss_mb()  # pylint: disable=protected-access
  summary = tune_lib.tune(params, verbose=0)
  return rss_start, trials_lib.read_trials(params.tune_dir), summary["wall_seconds"]


def summarize(rows: list[dict], rss_start: float, keep_trial_graphs: bool,
              wall_seconds: float) -> dict:
  """The JSON record of a search's rows: RSS after the first, middle and last trials, the growth.

  The first trials grow the allocator's pools to the largest model and batch
  drawn so far; a leak shows as growth that goes on in the second half.
  """
  rss = np.array([r["rss_mb"] for r in rows])
  half = max(1, len(rss) // 2)
  slope = np.polyfit(np.arange(half, len(rss)), rss[half:], 1)[0] if len(rss) > 3 else np.nan
  return {"bench": "bench_tune_memory", "trials": len(rows),
          "keep_trial_graphs": keep_trial_graphs, "rss_start_mb": round(rss_start),
          "rss_after_first_mb": round(rss[0]), "rss_after_half_mb": round(rss[half - 1]),
          "rss_after_last_mb": round(rss[-1]), "rss_max_mb": round(rss.max()),
          "growth_second_half_mb": round(rss[-1] - rss[half - 1]),
          "slope_second_half_mb_per_trial": None if np.isnan(slope) else round(float(slope), 2),
          "wall_seconds": wall_seconds}


def report(rows: list[dict], result: dict) -> str:
  """The table of each trial's RSS and summarize()'s growth, in a fenced block."""
  lines = ["```", f"RSS before the search (TensorFlow imported): {result['rss_start_mb']} MB",
           f"{'trial':>5}  {'status':9}  {'model_args':14}  {'batch':>5}  {'seconds':>7}  "
           f"{'RSS MB':>7}"]
  lines += [f"{r['trial']:>5}  {r['status']:9}  {_args(r.get('model_args')):14}  "
            f"{r['batch_size']:>5}  {r['seconds']:7.1f}  {r['rss_mb']:7.0f}" for r in rows]
  slope = result["slope_second_half_mb_per_trial"]
  lines += ["", f"RSS after trials 1 / {len(rows) // 2 or 1} / {len(rows)}: "
                f"{result['rss_after_first_mb']} / {result['rss_after_half_mb']} / "
                f"{result['rss_after_last_mb']} MB; second half: "
                f"{'-' if slope is None else format(slope, '+.2f')} MB a trial"
                f"{' (--keep_trial_graphs)' if result['keep_trial_graphs'] else ''}", "```"]
  return "\n".join(lines)


def _args(model_args) -> str:
  """A trial's model arguments as its flag writes them: {"width": 8} -> "width=8"."""
  if not isinstance(model_args, dict):
    return str(model_args if model_args is not None else "-")
  return ",".join(f"{k}={v}" for k, v in sorted(model_args.items())) or "defaults"


def write_page(text: str, result: dict, load_before: str) -> str:
  """Writes report()'s `text` and `result` to the run's page (tools/measured.py); its path.

  A run with --keep_trial_graphs has a page of its own, so the two stand side by side.
  """
  keep = result["keep_trial_graphs"]
  name = "bench_tune_memory" + ("_keep_trial_graphs" if keep else "")
  title = ("A search's memory, " + ("trial graphs kept (--keep_trial_graphs)" if keep else
                                    "with audioclf's per-trial clean-up")
           + " (tools/bench_tune_memory.py)")
  body = (f"\nTF {compat.TF_VERSION[0]}.{compat.TF_VERSION[1]}, Keras "
          f"{compat.keras.__version__}: resident memory after each trial of a random search.\n\n"
          + text)
  return measured.write(name, title, measured.command(), body, result, load_before)


def main() -> None:
  args = parse_args()
  if args.keep_trial_graphs:
    compat.forget_trial_gradients = lambda keep: None
  load_before = measured.load()
  out_dir = args.out_dir or tempfile.mkdtemp(prefix="bench_tune_memory_")
  rss_start, rows, wall_seconds = search(out_dir, args.trials)
  result = summarize(rows, rss_start, args.keep_trial_graphs, wall_seconds)
  text = report(rows, result)
  print(text.replace("```\n", "").replace("\n```", ""))
  print(json.dumps(result))
  if args.measured:
    print("wrote", write_page(text, result, load_before), file=sys.stderr)
  if not args.out_dir:
    shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())
