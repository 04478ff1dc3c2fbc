"""What each augmentation buys on unseen voices: the demo recipe with each one alone, and the preset.

  python tools/bench_augment.py --measured      # every row, seeds 0 and 1 (under an hour, 2 cores)
  python tools/bench_augment.py --rows=baseline,speed --seeds=0 --train_steps=200  # a quick look
  python tools/bench_augment.py --cache_dir=/tmp/cache --runs_dir=/tmp/bench_augment
  python tools/bench_augment.py --plan          # each row's flags, nothing trained

Rows, each trained with the Keras engine on this interpreter's stack, once per --seeds value
(which sets --seed and --shuffle_seed: the weights, the order and every augmentation's draws):

  baseline      --demo_flagfile as it is (flags/demo.flags: today's demo recipe)
  <name>        the demo recipe plus one augmentation alone (AUGMENTATIONS: the flags each one
                is): at the preset's own settings where the preset turns it on, else at its usual
                settings (STANDARD; --nostandard_rows leaves those rows out)
  all           the demo recipe plus everything the preset adds to its augmentations: the
                demo's model, steps and optimizer
  preset_bare   the control: --preset with the demo recipe's augmentation flags (its model,
                steps, keep_best, ... without what it adds to the demo's augmentations)
  preset        --preset itself (flags/real_speech.flags: its model, steps, keep_best, ...);
                these two are left out where the preset equals `all`

Each run is then evaluated (`python -m audioclf evaluate --split=test`, the checkpoint
evaluate takes by default: the best one where the run kept one) twice: on the data's test
split (new speakers within the training voices' range: "known voices") and on
--held_out_dir (audioclf synthesize --held_out_speakers, which tools/demo.sh writes:
voices, rates and pitches beyond the training range), by speaker for the weakest one.

The table shows each figure as the mean over seeds and each seed's value, and "gap closed":
how much of the baseline's gap between known and held-out accuracy the row's held-out
accuracy closes ((held_out - baseline held_out) / (baseline known - baseline held_out)),
then PASS or MISS for the preset (else `all`): it closes at least TARGET_GAP_CLOSED of the gap.
--measured writes it to docs/measured/bench_augment.md (tools/measured.py). Run from the
repository root; progress goes to stderr, one JSON line ends stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Optional

from absl import app, flags

import measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS
# Each augmentation (a row), as the flags it is: its row takes all of them from the preset.
# A row is made for each whose first flag the preset sets apart from the demo recipe.
AUGMENTATIONS = {
    "speed": ("speed_perturb",),
    "pitch": ("pitch_shift_semitones", "pitch_tempo_prob"),
    "tempo": ("tempo_perturb", "pitch_tempo_prob"),
    "reverb": ("reverb_prob", "reverb_rt60", "rir_dir"),
    "noise": ("noise_prob", "noise_snr_db", "noise_dir"),
    "gain": ("gain_db",),
    "mixup": ("mixup_alpha",),
    "spec_augment": ("spec_augment", "freq_masks", "freq_mask_bins", "time_masks",
                     "time_mask_frames"),
    "balanced": ("balanced_sampler", "class_weights"),
    "label_smoothing": ("label_smoothing",),
}
# An augmentation the preset leaves as the demo recipe has it gets its row at these usual settings
# (the flags' help and Kaldi's, kws_streaming's and SpecAugment's papers), so the table shows what
# each one buys, in the preset or not. Noise is the demo recipe's own: it has no row.
STANDARD = {
    "speed": ("--speed_perturb=0.9,1.1",),
    "pitch": ("--pitch_shift_semitones=-2,2", "--pitch_tempo_prob=0.5"),
    "tempo": ("--tempo_perturb=0.9,1.1", "--pitch_tempo_prob=0.5"),
    "reverb": ("--reverb_prob=0.5", "--reverb_rt60=0.2,0.8"),
    "gain": ("--gain_db=-6,6",),
    "mixup": ("--mixup_alpha=0.2",),
    "spec_augment": ("--spec_augment",),
    "balanced": ("--balanced_sampler",),
    "label_smoothing": ("--label_smoothing=0.1",),
}
FIXED = ("baseline", "all", "preset_bare", "preset")
# The recipe closes at least this share of the baseline's gap between known and held-out voices.
TARGET_GAP_CLOSED = 0.5


def define_flags() -> None:
  flags.DEFINE_string("preset", "flags/real_speech.flags", "The recipe whose augmentations "
                      "the rows add one by one, and the last row.")
  flags.DEFINE_string("demo_flagfile", "flags/demo.flags", "The baseline recipe every other "
                      "row adds to.")
  flags.DEFINE_list("rows", [], "Rows to run (baseline, an AUGMENTATIONS name, all, preset); "
                    "default every one.")
  flags.DEFINE_bool("standard_rows", True, "Also a row for each augmentation the preset leaves "
                    "off, at its usual settings (STANDARD): what each one buys, in the preset or "
                    "not.")
  flags.DEFINE_list("seeds", ["0", "1"], "Seeds of each row: --seed and --shuffle_seed.")
  flags.DEFINE_integer("train_steps", 0, "Training steps of every run; 0: each recipe's own.")
  flags.DEFINE_string("data_dir", None, "Training data (default: the recipes' --data_dir).")
  flags.DEFINE_string("held_out_dir", None, "Unseen voices, every clip in its "
                      "testing_list.txt (default <data_dir>/_held_out).")
  flags.DEFINE_string("cache_dir", None, "The clip cache (default: the recipes').")
  flags.DEFINE_string("runs_dir", "runs/bench_augment", "Where each run's model_dir goes "
                      "(<row>-seed<seed>), replaced when it runs again.")
  flags.DEFINE_bool("measured", False, "Write the table to docs/measured/bench_augment.md.")
  flags.DEFINE_bool("plan", False, "Print each row's training flags as JSON and train nothing.")


def recipe_flags(flagfile: str) -> flags.FlagValues:
  """A flagfile read as `audioclf train` reads it (the presets and flagfiles it includes too)."""
  from audioclf.commands import flags as command_flags  # pylint: disable=g-import-not-at-top
  return command_flags.recipe([f"--flagfile={flagfile}"])


def plan() -> dict[str, list[str]]:
  """Every row's training flags (after the run's own: model_dir, seeds, steps, data)."""
  demo, preset = recipe_flags(FLAGS.demo_flagfile), recipe_flags(FLAGS.preset)
  differs = lambda name: demo[name].value != preset[name].value  # noqa: E731
  rows = {"baseline": [f"--flagfile={FLAGS.demo_flagfile}"]}
  added = []
  for name, group in AUGMENTATIONS.items():
    if differs(group[0]):
      settings = [preset[f].serialize() for f in group if differs(f)]
      rows[name] = rows["baseline"] + settings
      added += [s for s in settings if s not in added]
    elif name in STANDARD and FLAGS.standard_rows:
      rows[name] = rows["baseline"] + list(STANDARD[name])
  rows["all"] = rows["baseline"] + added
  everything = list(dict.fromkeys(f for group in AUGMENTATIONS.values() for f in group))
  others = [name for name in preset if name not in everything and differs(name)
            and name not in ("model_dir", "flagfile")]
  if others:  # Model, steps, optimizer...: the preset is more than `all`.
    # The control: the preset's model, steps and optimizer with the demo's augmentations.
    rows["preset_bare"] = [f"--flagfile={FLAGS.preset}"] + [
        demo[f].serialize() for f in everything if differs(f)]
    rows["preset"] = [f"--flagfile={FLAGS.preset}"]
  unknown = set(FLAGS.rows) - set(rows) - set(FIXED) - set(AUGMENTATIONS)
  if unknown:
    raise app.UsageError(f"--rows: unknown {sorted(unknown)}; known: {list(rows)}")
  return {k: v for k, v in rows.items() if not FLAGS.rows or k in FLAGS.rows}


def audioclf_json(*args: str) -> dict:
  """`python -m audioclf <args>` with this interpreter; its last line, JSON."""
  proc = subprocess.run([sys.executable, "-m", "audioclf", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=4 * 3600)
  if proc.returncode != 0:
    raise RuntimeError(f"audioclf {' '.join(args)} exited {proc.returncode}:\n"
                       f"{proc.stderr[-3000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def run(row: str, row_flags: list[str], seed: str) -> dict:
  """One row's training at one seed, and its two evaluations."""
  model_dir = os.path.join(FLAGS.runs_dir, f"{row}-seed{seed}")
  shutil.rmtree(model_dir, ignore_errors=True)  # A run from scratch, not a resumed one.
  cache = [f"--cache_dir={FLAGS.cache_dir}"] if FLAGS.cache_dir else []
  data = ([f"--data_dir={FLAGS.data_dir}"] if FLAGS.data_dir else []) + cache
  steps = [f"--train_steps={FLAGS.train_steps}"] if FLAGS.train_steps else []
  t = time.perf_counter()
  train = audioclf_json("train", *row_flags, f"--model_dir={model_dir}", f"--seed={seed}",
                    f"--shuffle_seed={seed}", *steps, *data)
  seconds = time.perf_counter() - t
  result = {"row": row, "seed": int(seed), "flags": row_flags, "model_dir": model_dir,
            "train_seconds": round(seconds, 1), "examples_per_sec": train.get("examples_per_sec"),
            **evaluations(model_dir, data, cache)}
  _log(f"{row} seed {seed}: known {result['known']:.3f}, held out {result['held_out']:.3f}, "
       f"weakest {result['weakest']:.3f} ({result['weakest_speaker']}), step {result['steps']}, "
       f"{seconds:.0f} s")
  return result


def evaluations(model_dir: str, data: list[str], cache: list[str],
                held_out: Optional[list[str]] = None) -> dict:
  """A trained run on the known voices (the test split) and the held-out ones, by speaker.

  Args:
    model_dir: the run's.
    data: the data flags of the known voices (default: the run's own).
    cache: the --cache_dir flag, if any.
    held_out: the data flags of the held-out voices (default --held_out_dir's folder).
  """
  known = audioclf_json("evaluate", f"--model_dir={model_dir}", "--split=test", *data)
  if held_out is None:
    data_dir = FLAGS.data_dir or recipe_flags(FLAGS.demo_flagfile)["data_dir"].value
    held_out = [f"--data_dir={FLAGS.held_out_dir or os.path.join(data_dir, '_held_out')}"]
  report_dir = os.path.join(model_dir, "eval_held_out")
  held_out = audioclf_json("evaluate", f"--model_dir={model_dir}", "--split=test", *held_out,
                       "--group_by=speaker", f"--report_dir={report_dir}", *cache)
  with open(os.path.join(report_dir, "report.json")) as f:
    report = json.load(f)
  weakest = report["groups"]["rows"][0]  # Weakest first.
  with open(os.path.join(known["report_dir"], "report.json")) as f:
    known_examples = json.load(f)["examples"]
  return {"steps": held_out["steps"], "checkpoint": held_out["checkpoint"],
          "known": known["accuracy"], "held_out": held_out["accuracy"],
          "weakest": weakest["accuracy"], "weakest_speaker": weakest["group"],
          "examples": {"known": known_examples, "held_out": report["examples"],
                       "speakers": len(report["groups"]["rows"]), "weakest": weakest["examples"]}}


def _log(msg: str) -> None:
  print(msg, file=sys.stderr, flush=True)


def _cell(values: list[float]) -> str:
  """The mean, and each seed's value where there are several."""
  mean = statistics.fmean(values)
  return f"{mean:.3f}" + (f" ({', '.join(f'{v:.3f}' for v in values)})" if len(values) > 1
                          else "")


def summarize(results: list[dict], rows: dict[str, list[str]]) -> list[dict]:
  """Each row's figures over its seeds, and the share of the baseline's gap it closes."""
  summary = []
  for row in rows:
    runs = [x for x in results if x["row"] == row]
    summary.append({"row": row, "seeds": [x["seed"] for x in runs],
                    **{k: [x[k] for x in runs]
                       for k in ("known", "held_out", "weakest", "steps", "train_seconds")},
                    "adds": " ".join(_added(rows[row], rows))})
  base = next((s for s in summary if s["row"] == "baseline"), None)
  gap = statistics.fmean(base["known"]) - statistics.fmean(base["held_out"]) if base else 0.0
  for s in summary:
    if gap > 0:
      s["gap_closed"] = (statistics.fmean(s["held_out"]) - statistics.fmean(base["held_out"])) / gap
  return summary


def _added(row_flags: list[str], rows: dict[str, list[str]]) -> list[str]:
  """A row's flags after the demo recipe's flagfile; all of them where it starts elsewhere."""
  demo = rows["baseline"] if "baseline" in rows else [f"--flagfile={FLAGS.demo_flagfile}"]
  return row_flags[len(demo):] if row_flags[:len(demo)] == demo else row_flags


def table(summary: list[dict]) -> str:
  """The markdown table: a line per row, seeds side by side; then the preset's verdict."""
  lines = ["| row | adds to the demo recipe | step evaluated | train s | known voices (test) | "
           "held-out voices | weakest held-out speaker | gap closed |",
           "|---|---|---|---|---|---|---|---|"]
  for s in summary:
    closed = f"{s['gap_closed']:+.0%}" if "gap_closed" in s else "-"
    adds = "(today's demo preset)" if s["row"] == "baseline" else f"`{s['adds']}`"
    lines.append(f"| {s['row']} | {adds} | {'/'.join(str(v) for v in sorted(set(s['steps'])))} "
                 f"| {statistics.fmean(s['train_seconds']):.0f} | {_cell(s['known'])} "
                 f"| {_cell(s['held_out'])} | {_cell(s['weakest'])} | {closed} |")
  return "\n".join(lines + ["", *verdicts(summary)])


def verdicts(summary: list[dict]) -> list[str]:
  """PASS or MISS of the recipe (the preset row, else `all`) against TARGET_GAP_CLOSED."""
  by = {s["row"]: s for s in summary}
  recipe = by.get("preset") or by.get("all")
  if recipe is None or "gap_closed" not in recipe:
    return []
  ok = recipe["gap_closed"] >= TARGET_GAP_CLOSED
  return [f"{'PASS' if ok else 'MISS'} `{recipe['row']}` closes {recipe['gap_closed']:.0%} of "
          f"the baseline's gap between known and held-out voices (want >= "
          f"{TARGET_GAP_CLOSED:.0%}); its weakest held-out speaker "
          f"{statistics.fmean(recipe['weakest']):.3f}, the baseline's "
          f"{statistics.fmean(by['baseline']['weakest']):.3f}"]


def _notes(examples: dict, rows: dict[str, list[str]]) -> str:
  """What the table's figures are, with the clip counts behind them."""
  seeds = ", ".join(FLAGS.seeds)
  one = lambda n: f"{n} clips: one clip is {1 / n:.3f}"  # noqa: E731
  return (f"\nEach cell: the mean over seeds {seeds} (each seed's value in brackets: the "
          "run-to-run spread). Known voices: the test split of the training data (new speakers "
          f"within the training voices' range, {one(examples['known'])}); held-out voices: "
          f"{examples['speakers']} speakers of voices, rates and pitches no training speaker has "
          f"({one(examples['held_out'])}; the weakest speaker's {one(examples['weakest'])}). "
          "Gap closed: of the baseline's gap between known and held-out accuracy, the share the "
          "row's held-out accuracy closes. Train s: seconds of `audioclf train` on this machine "
          "as loaded. Every row but `preset_bare` and `preset` trains the demo recipe's model and "
          f"steps.{_standard_note(rows)}\n")


def _standard_note(rows: dict[str, list[str]]) -> str:
  """Which rows try an augmentation the preset leaves off (at its STANDARD settings)."""
  demo, preset = recipe_flags(FLAGS.demo_flagfile), recipe_flags(FLAGS.preset)
  names = [name for name in STANDARD if name in rows
           and demo[AUGMENTATIONS[name][0]].value == preset[AUGMENTATIONS[name][0]].value]
  return (f" Not in the preset, at their usual settings: {', '.join(names)}." if names else "")


def main(argv) -> None:
  del argv
  os.chdir(ROOT)  # The recipes name each other, and their data, from the repository root.
  load_before = measured.load()
  rows = plan()
  if FLAGS.plan:
    print(json.dumps(rows))
    return
  _log(f"{len(rows)} rows x {len(FLAGS.seeds)} seeds: {', '.join(rows)}")
  results = [run(row, row_flags, seed) for seed in FLAGS.seeds
             for row, row_flags in rows.items()]
  summary = summarize(results, rows)
  text = table(summary)
  print(text)
  notes = _notes(results[0]["examples"], rows)
  record = {"bench": "bench_augment", "rows": summary, "runs": results,
            "preset": FLAGS.preset, "seeds": [int(s) for s in FLAGS.seeds]}
  if FLAGS.measured:
    command = "python tools/bench_augment.py " + " ".join(sys.argv[1:])
    print("wrote", measured.write("bench_augment", "What each augmentation buys on unseen voices "
                                  "(tools/bench_augment.py)", command.strip(),
                                  f"\n{text}\n{notes}", record, load_before=load_before),
          file=sys.stderr)
  print(json.dumps(record))


if __name__ == "__main__":
  define_flags()
  app.run(main)
