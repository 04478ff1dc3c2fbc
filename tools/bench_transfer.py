"""What a pretrained speech front end buys on voices never heard: from scratch, frozen, fine-tuned, few-shot.

  python tools/bench_transfer.py --measured      # every row (under an hour on 2 cores)
  python tools/bench_transfer.py --rows=frozen --train_steps=100   # a quick look
  python tools/bench_transfer.py --plan          # each row's flags, nothing trained
  python tools/bench_transfer.py --speed --measured   # the training speed rows alone (minutes)

Rows, each trained with the Keras engine on this interpreter's stack:

  scratch_demo         --preset=demo: the demo's small CNN from scratch
  scratch_real_speech  --preset=real_speech: the from-scratch recipe for real voices
  frozen               the pretrained preset's head on a frozen embedding
  fine_tuned           --preset=pretrained_speech: its last two blocks fine-tuned
  few_shot_<k>         the pretrained preset on the synthesized words plus k clips of each word
                       spoken by the enrolment voices (--few_shot; as many as they have where
                       that is fewer), through a CSV manifest

Data: --data_dir holds the synthesized words (`audioclf synthesize`, as tools/demo.sh writes
data/speech_words) and <data_dir>/_held_out the voices no training speaker has (its
--held_out_speakers): the stand-in for real recordings. Half of the held-out speakers, by id, are
enrolment voices whose clips the few-shot rows may train on; every row is measured on the other
half alone (the held-out columns), and on the test split of the synthesized words (known
voices), by speaker for the weakest one. Training seconds are `audioclf train`'s wall time on
this machine as loaded. --measured writes docs/measured/bench_transfer.md (tools/measured.py).
Run from the repository root; progress goes to stderr, one JSON line ends stdout. --speed runs
only the speed rows (tools/transfer_speed.py: steps/s from cached embeddings, from audio, from
scratch), which --measured writes into their own section of the page, leaving the rest as it was.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil
import sys
import time

from absl import app, flags

import bench_augment
import measured
import transfer_speed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS
ROWS = {
    "scratch_demo": ["--preset=demo"],
    "scratch_real_speech": ["--preset=real_speech"],
    "frozen": ["--preset=pretrained_speech", "--model_args=head=conv,width=64"],
    "fine_tuned": ["--preset=pretrained_speech"],
}


def define_flags() -> None:
  flags.DEFINE_list("rows", [], "Rows to run (see the module docstring); default every one.")
  flags.DEFINE_list("few_shot", ["1", "5", "20"], "Clips of each word from the enrolment voices "
                    "the few-shot rows add to the synthesized ones.")
  flags.DEFINE_integer("train_steps", 0, "Training steps of every run; 0: each preset's own.")
  flags.DEFINE_string("data_dir", "data/speech_words", "The synthesized words, with _held_out/.")
  flags.DEFINE_string("cache_dir", ".cache/audioclf", "The clip cache.")
  flags.DEFINE_string("runs_dir", "runs/bench_transfer", "Where each run's model_dir and the "
                      "few-shot manifests go (replaced when the row runs again).")
  flags.DEFINE_integer("seed", 0, "--seed and --shuffle_seed of every run.")
  flags.DEFINE_bool("measured", False, "Write the table to docs/measured/bench_transfer.md.")
  flags.DEFINE_bool("plan", False, "Print each row's training flags as JSON and train nothing.")
  flags.DEFINE_bool("speed", False, "Run only the training speed rows (tools/transfer_speed.py), "
                    "100 steps each unless --train_steps says otherwise.")


def held_out_clips() -> dict[str, list[tuple[str, str]]]:
  """The held-out voices' clips, (path, word) by speaker id, sorted."""
  from audioclf.data import manifest  # pylint: disable=g-import-not-at-top
  clips = {}
  for path in sorted(glob.glob(os.path.join(FLAGS.data_dir, "_held_out", "*", "*.wav"))):
    word = os.path.basename(os.path.dirname(path))
    clips.setdefault(manifest.speaker_of(path), []).append((os.path.abspath(path), word))
  if len(clips) < 2:
    raise app.UsageError(f"{FLAGS.data_dir}/_held_out has {len(clips)} speakers; the bench "
                         "needs two or more (audioclf synthesize --held_out_speakers)")
  return clips


def enrolment_split(clips: dict) -> tuple[list, list]:
  """(enrolment clips, evaluation clips): the first half of the speakers' and the rest's."""
  speakers = sorted(clips)
  half = len(speakers) // 2
  return ([c for s in speakers[:half] for c in clips[s]],
          [c for s in speakers[half:] for c in clips[s]])


def few_shot(enrolment: list[tuple[str, str]], k: int) -> list[tuple[str, str]]:
  """k clips of each word, taken from the enrolment speakers in turn."""
  by_word = {}
  for path, word in enrolment:
    by_word.setdefault(word, []).append((path, word))
  chosen = []
  for clips in by_word.values():
    by_speaker = sorted(clips, key=lambda c: (os.path.basename(c[0]).split("_nohash_")[1], c[0]))
    chosen += by_speaker[:k]
  return chosen


def write_manifest(path: str, rows: list[tuple[str, str, str]]) -> str:
  """A CSV manifest of (path, label, split) rows; an empty split is hashed by speaker."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(("path", "label", "split"))
    writer.writerows(rows)
  return path


def synthesized() -> list[tuple[str, str, str]]:
  """The synthesized words as manifest rows, their split left to the speaker hash."""
  paths = glob.glob(os.path.join(FLAGS.data_dir, "[!_]*", "*.wav"))
  return [(os.path.abspath(p), os.path.basename(os.path.dirname(p)), "") for p in sorted(paths)]


def plan(enrolment: list, evaluation: list) -> dict[str, dict]:
  """Every row's training flags and the data flags of its two evaluations."""
  data = [f"--data_dir={FLAGS.data_dir}"]
  held_out = ["--data_dir=", "--manifest=" + write_manifest(
      os.path.join(FLAGS.runs_dir, "held_out_evaluation.csv"),
      [(path, word, "test") for path, word in evaluation])]
  rows = {name: {"train": flags_ + data, "known": data, "held_out": held_out, "real_clips": 0}
          for name, flags_ in ROWS.items()}
  noise = f"--noise_dir={os.path.join(FLAGS.data_dir, '_background_noise_')}"
  for k in map(int, FLAGS.few_shot):
    real = few_shot(enrolment, k)
    csv_path = write_manifest(os.path.join(FLAGS.runs_dir, f"few_shot_{k}.csv"), synthesized() + [
        (path, word, "train") for path, word in real])
    manifest = ["--data_dir=", f"--manifest={csv_path}", noise]
    rows[f"few_shot_{k}"] = {"train": ROWS["fine_tuned"] + manifest, "known": manifest,
                             "held_out": held_out, "real_clips": len(real)}
  unknown = set(FLAGS.rows) - set(rows)
  if unknown:
    raise app.UsageError(f"--rows: unknown {sorted(unknown)}; known: {list(rows)}")
  return {k: v for k, v in rows.items() if not FLAGS.rows or k in FLAGS.rows}


def run(name: str, row: dict) -> dict:
  """One row's training and its two evaluations."""
  model_dir = os.path.join(FLAGS.runs_dir, name)
  shutil.rmtree(model_dir, ignore_errors=True)  # A run from scratch, not a resumed one.
  cache = [f"--cache_dir={FLAGS.cache_dir}"]
  steps = [f"--train_steps={FLAGS.train_steps}"] if FLAGS.train_steps else []
  t = time.perf_counter()
  bench_augment.audioclf_json("train", *row["train"], f"--model_dir={model_dir}",
                          f"--seed={FLAGS.seed}", f"--shuffle_seed={FLAGS.seed}", *steps, *cache)
  seconds = time.perf_counter() - t
  result = {"row": name, "flags": row["train"], "real_clips": row["real_clips"],
            "train_seconds": round(seconds, 1),
            **bench_augment.evaluations(model_dir, row["known"] + cache, cache, row["held_out"])}
  _log(f"{name}: known {result['known']:.3f}, held out {result['held_out']:.3f}, weakest "
       f"{result['weakest']:.3f} ({result['weakest_speaker']}), {seconds:.0f} s")
  return result


def table(results: list[dict]) -> str:
  lines = ["| row | trains | held-out clips in training | step evaluated | train s | "
           "known voices (test) | held-out voices | weakest held-out voice |",
           "|---|---|---|---|---|---|---|---|"]
  for r in results:
    trains = " ".join(f for f in r["flags"] if not f.startswith(("--data_dir", "--manifest",
                                                                  "--noise_dir")))
    lines.append(f"| {r['row']} | `{trains}` | {r['real_clips']} | {r['steps']} | "
                 f"{r['train_seconds']:.0f} | "
                 f"{r['known']:.3f} | {r['held_out']:.3f} | {r['weakest']:.3f} |")
  return "\n".join(lines)


def notes(results: list[dict], enrolment: list, evaluation: list) -> str:
  examples = results[0]["examples"]
  return (f"\nHeld-out voices: {examples['speakers']} speakers of voices, rates and pitches no "
          f"training speaker has, {examples['held_out']} clips (one clip is "
          f"{1 / examples['held_out']:.3f}; the weakest voice's {examples['weakest']} clips); "
          f"the few-shot rows' k clips of each word come from {len(enrolment)} clips of the "
          "other held-out speakers, which no row is measured on. Known voices: the test split of "
          f"the synthesized words ({examples['known']} clips). The few-shot rows train on a CSV "
          "manifest of the synthesized words (split by speaker hash) and their k clips (split "
          "train): docs/transfer.md shows how to write one for recordings of your own.\n")


def _log(msg: str) -> None:
  print(msg, file=sys.stderr, flush=True)


def main(argv) -> None:
  del argv
  os.chdir(ROOT)  # The presets name their data from the repository root.
  load_before = measured.load()
  if FLAGS.speed:
    speed(load_before)
    return
  enrolment, evaluation = enrolment_split(held_out_clips())
  rows = plan(enrolment, evaluation)
  if FLAGS.plan:
    print(json.dumps({name: row["train"] for name, row in rows.items()}))
    return
  _log(f"{len(rows)} rows: {', '.join(rows)}")
  results = [run(name, row) for name, row in rows.items()]
  text = table(results)
  print(text)
  record = {"bench": "bench_transfer", "rows": results, "seed": FLAGS.seed}
  if FLAGS.measured:
    print("wrote", measured.write(
        "bench_transfer", "A pretrained speech front end on voices never heard "
        "(tools/bench_transfer.py)", measured.command(), f"\n{text}\n"
        f"{notes(results, enrolment, evaluation)}\n{transfer_speed.kept(page())}", record,
        load_before=load_before),
        file=sys.stderr)
  print(json.dumps(record))


def page() -> str:
  return os.path.join(measured.directory(), "bench_transfer.md")


def speed(load_before: str) -> None:
  """The speed rows; with --measured, their section of the page (the rest kept as it is)."""
  steps = FLAGS.train_steps or 100
  results = transfer_speed.run(FLAGS.runs_dir, steps, FLAGS.seed, _log)
  text = transfer_speed.section(results, steps, measured.command(), load_before)
  print(text)
  if FLAGS.measured:
    try:
      with open(page()) as f:
        old = f.read()
    except FileNotFoundError:
      old = "# A pretrained speech front end on voices never heard (tools/bench_transfer.py)\n"
    with open(page(), "w") as f:
      f.write(transfer_speed.spliced(old, text))
    print("wrote", page(), file=sys.stderr)
  print(json.dumps({"bench": "bench_transfer", "speed": results, "seed": FLAGS.seed}))


if __name__ == "__main__":
  define_flags()
  app.run(main)
