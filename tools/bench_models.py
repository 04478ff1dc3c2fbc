"""The built-in models side by side: size, cost, CPU speed on each stack, accuracy on known and unseen voices.

  python tools/bench_models.py --measured          # every row below (about an hour on 2 cores)
  python tools/bench_models.py --rows=cnn:width=16,bc_resnet --train_steps=200 --rounds=1

A row is `name[:model_args]` (a registered model and its --model_args, ";"
between several: `bc_resnet:scale=8`). For each:

  parameters     trainable weights, with the 12-class head of Speech Commands' 12-class task
  MACs / clip    multiply-adds of the conv and dense layers for one 1 s clip at 16 kHz
                 (40 mels, 98 frames; the log-mel front end is left out, as the papers count)
  steps/s        Keras fit at batch 64 on in-memory batches, in each stack's venv
                 (tools/bench_stacks.py's worker: the same measurement as its demo CNN)
  accuracy       trained --train_steps on the demo data (flags/demo.flags, current stack):
                 its test split (voices heard in training), and voices held out from training

--measured writes the table to docs/measured/bench_models.md (tools/measured.py),
which docs/models.md points to. Progress goes to stderr; one JSON line ends stdout.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

import bench_stacks
import measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = ("cnn:width=16", "cnn", "ds_cnn", "bc_resnet", "bc_resnet:scale=8", "matchboxnet")
CLASSES = 12
HELD_OUT = "data/speech_words/_held_out"  # tools/demo.sh's unseen voices.
FLAGS = flags.FLAGS


def define_flags() -> None:
  bench_stacks.define_driver_flags(page="bench_models")  # --measured among them.
  FLAGS.set_default("rounds", 2)
  flags.DEFINE_list("rows", list(ROWS), "Models to measure: name[:model_args], args ';'-joined.")
  flags.DEFINE_integer("train_steps", 600, "Training steps of each accuracy run; 0 skips them.")
  flags.DEFINE_string("runs_dir", os.path.join(ROOT, "runs", "bench_models"),
                      "Where the accuracy runs' model_dirs go.")


def parse_row(row: str) -> tuple[str, str]:
  """'bc_resnet:scale=8;sub_bands=5' -> ('bc_resnet', 'scale=8,sub_bands=5')."""
  name, _, args = row.partition(":")
  return name, args.replace(";", ",")


def size_and_cost(name: str, args: str) -> dict:
  """Trainable parameters and multiply-adds a clip of the model on this stack."""
  # pylint: disable=g-import-not-at-top
  from audioclf import Params
  from audioclf.model import build, cost
  # pylint: enable=g-import-not-at-top
  model = build.build_model(Params(model=name, model_args=args), CLASSES)
  return {"parameters": cost.parameters(model), "macs": cost.macs(model)}


def speeds(name: str, args: str, stacks: list[str]) -> dict:
  """Median steps/s and CPU ms a step of each stack, over interleaved rounds (none: {})."""
  if not FLAGS.rounds:
    return {}
  model_flags = (f"--model={name}", f"--model_args={args}", "--batch_size=64",
                 "--nospec_augment", "--learning_rate=0.003")
  runs = {s: [] for s in stacks}
  for r in range(FLAGS.rounds):
    for stack in stacks[r % len(stacks):] + stacks[:r % len(stacks)]:
      result = bench_stacks.run_round(bench_stacks.stack_python(stack),
                                      os.path.join(FLAGS.out_dir, f"result-{stack}.json"),
                                      model_flags)
      runs[stack].append(result)
      _log(f"  {name} {args} {stack}: {result['steps_per_s']:.2f} steps/s")
  return {s: {"steps_per_s": statistics.median(x["steps_per_s"] for x in rs),
              "cpu_ms_per_step": statistics.median(x["cpu_ms_per_step"] for x in rs)}
          for s, rs in runs.items()}


def accuracy(name: str, args: str) -> dict:
  """Test accuracy after --train_steps on the demo data: known voices, and held-out ones.

  Known: the test split's speakers, drawn from the training voices' range.
  Held out: audioclf synthesize --held_out_speakers (tools/demo.sh writes
  data/speech_words/_held_out), voices and rates beyond the training range.
  """
  model_dir = os.path.join(FLAGS.runs_dir, f"{name}-{args.replace(',', '-') or 'default'}")
  trained = _finished(model_dir)
  summary = trained or _audioclf("train", "--flagfile=flags/demo.flags", f"--model={name}",
                                 f"--model_args={args}", f"--model_dir={model_dir}",
                                 f"--train_steps={FLAGS.train_steps}")
  result = {"test_accuracy": summary["test_accuracy"], "train_seconds": summary["wall_seconds"],
            "model_dir": model_dir, "held_out_accuracy": None,
            "trained_before": trained["trained_at"] if trained else None}
  if os.path.isdir(os.path.join(ROOT, HELD_OUT)):
    held_out = _audioclf("evaluate", f"--model_dir={model_dir}", "--split=test",
                         f"--data_dir={HELD_OUT}", "--group_by=speaker",
                         f"--report_dir={model_dir}/eval_held_out")
    result["held_out_accuracy"] = held_out["accuracy"]
  return result


def _finished(model_dir: str):
  """The summary of a run in model_dir that already trained --train_steps, or None.

  A rerun (say, to measure speeds on a quiet machine) keeps the accuracy runs;
  delete runs/bench_models to train them again.
  """
  try:
    with open(os.path.join(model_dir, "metrics.json")) as f:
      summary = json.load(f)
  except FileNotFoundError:
    return None
  if summary.get("steps") != FLAGS.train_steps:
    return None
  _log(f"  {model_dir}: trained before ({FLAGS.train_steps} steps), its figures reused")
  mtime = os.path.getmtime(os.path.join(model_dir, "metrics.json"))
  return {**summary, "trained_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(mtime))}


def _audioclf(*args) -> dict:
  """`python -m audioclf <args>` on the current stack; its JSON line."""
  python = bench_stacks.stack_python("current")
  proc = subprocess.run([python, "-m", "audioclf", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=4 * 3600)
  if proc.returncode != 0:
    raise RuntimeError(f"audioclf {' '.join(args)} exited {proc.returncode}:\n"
                       f"{proc.stderr[-3000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _log(msg: str) -> None:
  print(msg, file=sys.stderr, flush=True)


def table(rows: list[dict], stacks: list[str]) -> str:
  """The markdown table of `rows`."""
  head = (["model", "args", "parameters", "MACs / clip"]
          + [f"steps/s {s}" for s in stacks]
          + ["test accuracy (known voices)", "accuracy on held-out voices"])
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [r["model"], f"`{r['args']}`" if r["args"] else "defaults", f"{r['parameters']:,}",
             f"{r['macs'] / 1e6:.1f}M"]
    cells += [f"{r['speed'][s]['steps_per_s']:.2f}" if s in r["speed"] else "-" for s in stacks]
    cells += [f"{r[k]:.3f}" if r.get(k) is not None else "-"
              for k in ("test_accuracy", "held_out_accuracy")]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def write_page(text: str, record: dict, load_before: str) -> str:
  """Writes the table and `record` to bench_models' page (tools/measured.py); returns its path.

  Args:
    text: the table, as table() draws it.
    record: the run's JSON record (main's).
    load_before: the load average when the run started.
  """
  body = (f"\n{text}\n\nsteps/s: Keras fit, batch 64, median of {record['rounds']} interleaved "
          f"rounds of {record['steps']} steps per stack. Accuracy: {record['train_steps']} steps "
          "of flags/demo.flags on the current stack.\n")
  reused = sorted({r["trained_before"] for r in record["rows"] if r.get("trained_before")})
  if reused:  # The accuracy runs of an earlier run of this tool, in runs/bench_models.
    body += (f"The accuracy runs were trained by an earlier run of this command ({', '.join(reused)}"
             "; under other load: their train seconds are not comparable) and evaluated again "
             "now.\n")
  return measured.write("bench_models", "Built-in models", measured.command(), body, record,
                        load_before=load_before)


def main(argv) -> None:
  del argv
  start, load_before = time.perf_counter(), measured.load()
  stacks = [s for s in bench_stacks.STACKS if os.access(bench_stacks.stack_python(s), os.X_OK)]
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  rows = []
  for row in FLAGS.rows:
    name, args = parse_row(row)
    _log(f"{name} {args or '(defaults)'}")
    result = {"model": name, "args": args, **size_and_cost(name, args),
              "speed": speeds(name, args, stacks)}
    if FLAGS.train_steps:
      result.update(accuracy(name, args))
    rows.append(result)
  text = table(rows, stacks)
  print(text)
  record = {"bench": "bench_models", "rows": rows, "stacks": stacks, "rounds": FLAGS.rounds,
            "steps": FLAGS.steps, "train_steps": FLAGS.train_steps,
            "seconds": round(time.perf_counter() - start)}
  if FLAGS.measured:
    print("wrote", write_page(text, record, load_before), file=sys.stderr)
  print(json.dumps(record))


if __name__ == "__main__":
  define_flags()
  app.run(main)
