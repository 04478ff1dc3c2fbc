"""The speed rows of tools/bench_transfer.py: training steps/s from cached embeddings, from audio, from scratch.

  python tools/bench_transfer.py --speed --measured   # these rows alone, into their page section

Rows, each `audioclf train` of --train_steps steps (the Keras engine, this stack):

  scratch_demo          --preset=demo: the demo's CNN from scratch
  frozen_from_audio     the pretrained preset's head on a frozen front end, every step through it
  frozen_embedded_cold  the same with --embedding_views=4: the first run embeds the train split
  frozen_embedded_warm  the same again into a new model_dir: it reads the cached embeddings
  last2_from_audio      --preset=pretrained_speech: its last two blocks fine-tuned, from audio
  last2_embedded_cold, last2_embedded_warm   the preset with --embedding_views=4: the cache holds
                        the activations where those two blocks begin

Data: a generated folder of 10 labels x 150 clips of 1 s (tones in noise): a step's cost does
not depend on what the clips hold. Steps/s is metrics.json's training rate (examples/s over
the batch size: steps alone, no evaluation, no cold pass); the wall time is the whole run's.
"""

from __future__ import annotations

import datetime
import os
import shutil
import time

import numpy as np
import soundfile as sf

import bench_augment
import measured

SECTION = "## Training speed: embed once"
FROZEN = ["--preset=pretrained_speech", "--model_args=head=conv,width=64"]
VIEWS = ["--embedding_views=4"]
ROWS = {
    "scratch_demo": ["--preset=demo"],
    "frozen_from_audio": FROZEN,
    "frozen_embedded_cold": FROZEN + VIEWS,
    "frozen_embedded_warm": FROZEN + VIEWS,
    "last2_from_audio": ["--preset=pretrained_speech"],
    "last2_embedded_cold": ["--preset=pretrained_speech"] + VIEWS,
    "last2_embedded_warm": ["--preset=pretrained_speech"] + VIEWS,
}
LABELS, CLIPS, RATE = 10, 150, 16000


def make_data(folder: str) -> str:
  """LABELS folders of CLIPS 1 s tones in noise, once: the rows' data."""
  if os.path.isdir(folder):
    return folder
  rng = np.random.default_rng(0)
  t = np.arange(RATE) / RATE
  for label in range(LABELS):
    os.makedirs(os.path.join(folder, f"w{label}"), exist_ok=True)
    for i in range(CLIPS):
      x = 0.3 * np.sin(2 * np.pi * 200 * (1.2 ** label) * (1 + 0.01 * (i % 7)) * t)
      x += 0.05 * rng.standard_normal(RATE)
      sf.write(os.path.join(folder, f"w{label}", f"s{i:03d}_nohash_0.wav"), x.astype("float32"),
               RATE, subtype="PCM_16")
  return folder


def run(runs_dir: str, steps: int, seed: int, log) -> list[dict]:
  """Every row, in order, on the generated data under `runs_dir`; a result per row.

  A cache of their own, emptied and filled with the clips first: the cold rows embed, and no
  row decodes.
  """
  data = make_data(os.path.join(runs_dir, "speed_data"))
  cache_dir = os.path.join(runs_dir, "speed_cache")
  shutil.rmtree(cache_dir, ignore_errors=True)
  bench_augment.audioclf_json("cache", "--preset=demo", f"--data_dir={data}", "--noise_dir=",
                              f"--cache_dir={cache_dir}")
  results = []
  for name, flags_ in ROWS.items():
    model_dir = os.path.join(runs_dir, f"speed_{name}")
    shutil.rmtree(model_dir, ignore_errors=True)
    start = time.perf_counter()
    metrics = bench_augment.audioclf_json(
        "train", *flags_, f"--data_dir={data}", "--noise_dir=", f"--cache_dir={cache_dir}",
        f"--model_dir={model_dir}", f"--train_steps={steps}", f"--eval_every_steps={steps}",
        "--keep_best=none", f"--seed={seed}", f"--shuffle_seed={seed}")
    seconds = time.perf_counter() - start
    rate = metrics["examples_per_sec"] / 64  # Both presets' batch size.
    results.append({"row": name, "flags": flags_, "steps_per_sec": round(rate, 2),
                    "wall_seconds": round(seconds, 1), "val_accuracy": metrics["val_accuracy"]})
    log(f"{name}: {rate:.2f} steps/s, {seconds:.0f} s in all")
  return results


def section(results: list[dict], steps: int, command: str, load_before: str) -> str:
  """The page's section: when and how it was measured, then a row each."""
  now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  rate = {r["row"]: r["steps_per_sec"] for r in results}
  wall = {r["row"]: r["wall_seconds"] for r in results}
  lines = [SECTION, "", f"Measured {now} by `{command}` ({steps} steps a row, batch 64; "
           f"load average {load_before} at the start, {measured.load()} at the end).", "",
           "| row | trains | steps/s | x its front end from audio | run s (all of it) |",
           "|---|---|---|---|---|"]
  for r in results:
    audio = rate["last2_from_audio" if r["row"].startswith("last2") else "frozen_from_audio"]
    lines.append(f"| {r['row']} | `{' '.join(r['flags'])}` | {r['steps_per_sec']:.2f} | "
                 f"{r['steps_per_sec'] / audio:.1f} | {r['wall_seconds']:.0f} |")
  cold = {cut: wall[f"{cut}_embedded_cold"] - wall[f"{cut}_embedded_warm"]
          for cut in ("frozen", "last2")}
  lines += ["", f"{LABELS} labels x {CLIPS} generated 1 s clips. A cold run embeds the train "
            f"split in 4 views first: it took {cold['frozen']:.0f} s (frozen) and "
            f"{cold['last2']:.0f} s (last2) longer than the warm run, which reads them. Every "
            "run ends with the full model's evaluation on raw audio."]
  return "\n".join(lines) + "\n"


def spliced(page: str, text: str) -> str:
  """`page` with its speed section (the last one, where it has one) replaced by `text`."""
  at = page.find(SECTION)
  return (page if at < 0 else page[:at]).rstrip("\n") + "\n\n" + text


def kept(path: str) -> str:
  """The speed section of the page at `path`, or "" (a full run keeps it as it was)."""
  try:
    with open(path) as f:
      page = f.read()
  except FileNotFoundError:
    return ""
  at = page.find(SECTION)
  return "" if at < 0 else page[at:]
