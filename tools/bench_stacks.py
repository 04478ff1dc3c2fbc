"""Training steps/s of the real CNN on each stack, side by side: is Keras 3 within 10% of Keras 2?

  python tools/bench_stacks.py                     # both stacks, 3 rounds each (~2-3 min on 2 cores)
  python tools/bench_stacks.py --rounds=5 --steps=60 --json=runs/bench_stacks.json
  python tools/bench_stacks.py --measured          # also to docs/measured/bench_stacks.md
  AUDIOCLF_VENV_LEGACY=/elsewhere/.venv-legacy python tools/bench_stacks.py

Trains the demo preset's model (flags/demo.flags: cnn, width 16, batch 64, no
SpecAugment) with the Keras engine's compile and fit (tools/bench_train.py's
run, without the stall meter), fed the same few batches from memory
(tools/benchdata.py's generated 1 s WAVs, cut by audioclf.input_fn), so the
steps/s are the training step's own. Each round runs once in each stack's venv,
in a subprocess of its own (`<venv>/bin/python tools/bench_stacks.py --worker
...`), so each has its own TensorFlow:

  current  TF >= 2.20, Keras 3   $AUDIOCLF_VENV, else .venv
  legacy   TF 2.15, Keras 2      $AUDIOCLF_VENV_LEGACY, else .venv-legacy

(tools/_venv.sh's conventions; a stack whose venv is missing is skipped with a
message). The venvs run this checkout's audioclf (PYTHONPATH). Rounds
interleave the stacks and alternate which goes first (A B, B A, A B, ...), and
the ratio is the median of the ratios within one round, so a shared machine's
slow drifts cancel. steps/s counts the steps after --warmup_steps (tracing,
thread start-up). Prints a table, PASS/MISS for the target (current / legacy
>= 0.90), the same comparison in process CPU time a step (which a loaded
machine disturbs less), and one JSON line; progress goes to stderr. With
--measured, the report and the JSON also go to docs/measured/bench_stacks.md
and .json (tools/measured.py).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = "--worker"  # As the first argument: run one round on this interpreter's stack.
STACKS = {"current": ("AUDIOCLF_VENV", ".venv"), "legacy": ("AUDIOCLF_VENV_LEGACY", ".venv-legacy")}
TARGET_RATIO = 0.90  # Keras 3's steps/s at least this fraction of Keras 2's.
# The demo preset's model and optimizer (flags/demo.flags); bench_train's flags take them.
DEMO_FLAGS = ("--model=cnn", "--model_args=width=16", "--nospec_augment", "--learning_rate=0.003",
              "--batch_size=64")
FLAGS = flags.FLAGS


def stack_python(stack: str) -> str:
  """The interpreter of a stack's venv, named as tools/_venv.sh names it."""
  env, default = STACKS[stack]
  return os.path.join(os.environ.get(env) or os.path.join(ROOT, default), "bin", "python")


# --- Worker: one round on the interpreter's own stack.


def cpu_clock(warmup_steps: int):
  """A Keras callback noting the process's CPU seconds (every thread) after the warm-up and at the end.

  CPU time per step is the work a step does, which other jobs on a shared
  machine disturb far less than they disturb wall-clock steps/s.
  """
  from audioclf.compat import keras  # pylint: disable=g-import-not-at-top

  class CpuClock(keras.callbacks.Callback):
    def __init__(self):
      super().__init__()
      self.steps, self.start, self.end = 0, None, None

    def on_train_batch_end(self, batch, logs=None):
      self.steps += 1
      if self.steps == warmup_steps:
        self.start = time.process_time()
      self.end = time.process_time()

  return CpuClock()


def define_worker_flags() -> None:
  import bench_train  # pylint: disable=g-import-not-at-top  (imports TensorFlow)
  bench_train.define_flags()
  flags.DEFINE_string("result", None, "Write this round's result to this JSON file.",
                      required=True)


def worker(argv) -> None:
  """Trains --steps steps of the model on repeated in-memory batches; writes steps/s to --result."""
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import audioclf  # pylint: disable=g-import-not-at-top
  from audioclf import compat  # pylint: disable=g-import-not-at-top
  from audioclf.commands import flags as command_flags  # pylint: disable=g-import-not-at-top
  from audioclf.data import manifest as manifest_lib  # pylint: disable=g-import-not-at-top
  import bench_train  # pylint: disable=g-import-not-at-top
  import benchdata  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel("ERROR")
  params = command_flags.params_from_flags()
  if not 1 <= FLAGS.warmup_steps < FLAGS.steps:
    raise app.UsageError("--warmup_steps must be at least 1 and less than --steps")
  root = os.path.join(FLAGS.out_dir, f"wav-{FLAGS.n_wav}")
  benchdata.make_files(benchdata.WORKLOADS["wav"], root, FLAGS.n_wav)
  # A cache of each stack's own: the two never share one folder.
  data_params = benchdata.audioclf_params(
      root, os.path.join(FLAGS.out_dir, f"cache-{compat.STACK}"), params)
  batches = [(f["waveform"].numpy(), y.numpy()) for f, y in
             audioclf.input_fn(data_params, "train", manifest=manifest_lib.load(data_params))
             .take(FLAGS.limit_batches)]
  t = time.perf_counter()
  cpu = cpu_clock(FLAGS.warmup_steps)
  run = bench_train.train_keras(data_params, lambda: benchdata.repeated_batches_input_fn(batches),
                                FLAGS.steps, metered=False, extra_callbacks=[cpu])
  result = {"stack": compat.STACK, "tensorflow": tf.__version__,
            "keras": compat.keras.__version__, "steps_per_s": run.steps_per_s,
            "cpu_ms_per_step": 1000 * (cpu.end - cpu.start) / run.measured_steps,
            "measured_steps": run.measured_steps, "first_step_s": run.first_step_s,
            "train_s": time.perf_counter() - t}
  with open(FLAGS.result, "w") as f:
    json.dump(result, f)


# --- Driver: rounds over the stacks' venvs.


def define_driver_flags(page: str = "bench_stacks") -> None:
  """The driver's flags (tools/bench_models.py's too, whose page is `page`)."""
  flags.DEFINE_integer("rounds", 3, "Rounds; each runs every stack once.")
  flags.DEFINE_integer("steps", 40, "Training steps of every run.")
  flags.DEFINE_integer("warmup_steps", 5, "First steps of a run left out of steps/s.")
  flags.DEFINE_integer("n_wav", 256, "1 s 16 kHz WAV files to generate (reused by later runs).")
  flags.DEFINE_integer("limit_batches", 4, "Distinct in-memory batches every run repeats.")
  flags.DEFINE_list("stacks", list(STACKS), "Stacks to run, in the first round's order.")
  flags.DEFINE_string("out_dir", os.path.join(tempfile.gettempdir(), "audioclf_bench_stacks"),
                      "Generated files and each stack's cache.")
  flags.DEFINE_integer("timeout_s", 600, "Give up on a round's run after this many seconds.")
  flags.DEFINE_string("json", None, "Also write the results to this JSON file.")
  flags.DEFINE_bool("measured", False, f"Also write the report to docs/measured/{page}.md "
                    "(and .json), headed by the date, machine, load and command.")


def _log(msg: str) -> None:
  print(msg, file=sys.stderr, flush=True)


def run_round(python: str, result_path: str, model_flags=DEMO_FLAGS) -> dict:
  """One worker run on `python`'s stack; its result dict. Raises RuntimeError naming the stack's failure.

  `model_flags`: the model and its training flags (default the demo preset's);
  tools/bench_models.py passes each built-in model's.
  """
  cmd = [python, os.path.abspath(__file__), WORKER, *model_flags, f"--steps={FLAGS.steps}",
         f"--warmup_steps={FLAGS.warmup_steps}", f"--n_wav={FLAGS.n_wav}",
         f"--limit_batches={FLAGS.limit_batches}", f"--out_dir={FLAGS.out_dir}",
         f"--result={result_path}"]
  # This checkout's audioclf, whichever checkout the venv was installed from.
  path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
  env = dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=FLAGS.timeout_s)
  if proc.returncode != 0:
    raise RuntimeError(f"{python} exited {proc.returncode}:\n{proc.stdout[-1500:]}"
                       f"{proc.stderr[-3000:]}")
  with open(result_path) as f:
    return json.load(f)


def _stacks() -> list[str]:
  """--stacks whose venv exists here (each missing one said on stderr)."""
  for stack in FLAGS.stacks:
    if stack not in STACKS:
      raise app.UsageError(f"--stacks: unknown {stack!r}; known: {list(STACKS)}")
  stacks = []
  for stack in FLAGS.stacks:
    python = stack_python(stack)
    if os.access(python, os.X_OK):
      stacks.append(stack)
    else:
      _log(f"skipped: {stack} stack: no {python} (tools/test.sh or tools/demo.sh creates it)")
  if not stacks:
    raise app.UsageError("no stack's venv found")
  return stacks


def rounds(stacks: list[str]) -> dict[str, list[dict]]:
  """--rounds interleaved rounds, each running every stack once: {stack: [round's result]}."""
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  runs: dict[str, list[dict]] = {s: [] for s in stacks}
  for r in range(FLAGS.rounds):
    for stack in stacks[r % len(stacks):] + stacks[:r % len(stacks)]:
      t = time.perf_counter()
      result = run_round(stack_python(stack), os.path.join(FLAGS.out_dir, f"result-{stack}.json"))
      runs[stack].append(result)
      _log(f"round {r + 1}/{FLAGS.rounds} {stack:7s} (TF {result['tensorflow']}, Keras "
           f"{result['keras']}): {result['steps_per_s']:6.2f} steps/s over "
           f"{result['measured_steps']} steps, {result['cpu_ms_per_step']:.0f} CPU ms a step "
           f"({time.perf_counter() - t:.0f} s)")
  return runs


def summarize(runs: dict[str, list[dict]], **settings) -> dict:
  """The JSON record of rounds(): medians per stack, ratios within rounds, the verdict.

  Args:
    runs: rounds()'s results, the same number of rounds for every stack.
    **settings: what the run was (steps, rounds, ...), into the record.
  """
  summary = {s: {"tensorflow": rs[0]["tensorflow"], "keras": rs[0]["keras"],
                 "steps_per_s": statistics.median(x["steps_per_s"] for x in rs),
                 "cpu_ms_per_step": statistics.median(x["cpu_ms_per_step"] for x in rs),
                 "rounds": [x["steps_per_s"] for x in rs]} for s, rs in runs.items()}
  ratios = ([c["steps_per_s"] / l["steps_per_s"] for c, l in zip(runs["current"], runs["legacy"])]
            if "current" in runs and "legacy" in runs else [])
  ratio = statistics.median(ratios) if ratios else None
  # The same comparison in CPU time a step (legacy / current: above 1, Keras 3 does less work).
  cpu_ratios = ([l["cpu_ms_per_step"] / c["cpu_ms_per_step"]
                 for c, l in zip(runs["current"], runs["legacy"])] if ratios else [])
  return {"bench": "bench_stacks", "stacks": summary, "ratio_current_to_legacy": ratio,
          "round_ratios": ratios,
          "cpu_ratio_legacy_to_current": statistics.median(cpu_ratios) if cpu_ratios else None,
          "target": TARGET_RATIO, "pass": None if ratio is None else ratio >= TARGET_RATIO,
          **settings}


def report(record: dict, head: str) -> str:
  """The table of summarize()'s `record` and its verdict under `head`, as printed and written.

  Returns:
    Markdown: `head`, then the table and the PASS/MISS line in a fenced block.
  """
  summary, ratios, ratio = record["stacks"], record["round_ratios"], record["ratio_current_to_legacy"]
  stacks = list(summary)
  lines = [head, "```",
           f"{'round':>5s}  " + "  ".join(f"{s + ' steps/s':>16s}" for s in stacks)
           + (f"  {'current/legacy':>14s}" if ratios else "")]
  for r in range(len(summary[stacks[0]]["rounds"])):
    lines.append(f"{r + 1:5d}  " + "  ".join(f"{summary[s]['rounds'][r]:16.2f}" for s in stacks)
                 + (f"  {ratios[r]:14.3f}" if ratios else ""))
  lines.append(f"{'median':>5s}  " + "  ".join(f"{summary[s]['steps_per_s']:16.2f}" for s in stacks)
               + (f"  {ratio:14.3f}" if ratios else ""))
  lines += [f"  {s}: TF {summary[s]['tensorflow']}, Keras {summary[s]['keras']}, "
            f"{summary[s]['cpu_ms_per_step']:.0f} CPU ms a step (median)" for s in stacks]
  if record["cpu_ratio_legacy_to_current"] is not None:
    lines.append(f"  in CPU time a step, legacy / current: "
                 f"{record['cpu_ratio_legacy_to_current']:.3f} (the load disturbs it less)")
  if ratio is None:
    lines.append("ratio: needs both stacks")
  else:
    lines += ["", f"{'PASS' if record['pass'] else 'MISS'}  keras3_vs_keras2 {ratio:.3f} "
                  f"(want >= {record['target']:.2f}: Keras 3 within 10% of Keras 2)"]
  return "\n".join(lines + ["```"])


def write_page(text: str, record: dict, load_before: str) -> str:
  """Writes report()'s `text` and `record` to bench_stacks' page (tools/measured.py); its path."""
  return measured.write("bench_stacks", "The two stacks' training speed (tools/bench_stacks.py)",
                        measured.command(), "\n" + text, record, load_before)


def driver(argv) -> None:
  del argv
  stacks = _stacks()
  start, load_before = time.perf_counter(), measured.load()
  record = summarize(rounds(stacks), steps=FLAGS.steps, warmup_steps=FLAGS.warmup_steps,
                     rounds=FLAGS.rounds, cpu_count=os.cpu_count())
  text = report(record, f"real CNN (demo preset: cnn width 16, batch 64), Keras fit on "
                        f"{FLAGS.limit_batches} in-memory batches, {FLAGS.steps} steps "
                        f"({FLAGS.warmup_steps} warm-up); {os.cpu_count()} CPU cores; "
                        f"{FLAGS.rounds} interleaved rounds")
  print("\n" + text.replace("```\n", "").replace("\n```", ""))
  print(f"({time.perf_counter() - start:.0f} s)")
  print(json.dumps(record))
  if FLAGS.json:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.json)), exist_ok=True)
    with open(FLAGS.json, "w") as f:
      json.dump(record, f, indent=2)
  if FLAGS.measured:
    print("wrote", write_page(text, record, load_before), file=sys.stderr)


if __name__ == "__main__":
  if sys.argv[1:2] == [WORKER]:
    del sys.argv[1]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    define_worker_flags()
    app.run(worker)
  else:
    define_driver_flags()
    app.run(driver)
