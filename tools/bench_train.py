"""python tools/bench_train.py --simulated_step_ms=30   # recommended: an accelerator-like step (~5 min)
python tools/bench_train.py --simulated_step_ms=30 --measured   # the same, written to docs/measured/
python tools/bench_train.py                          # the real audioclf model on the CPU (~6 min)
python tools/bench_train.py --simulated_step_ms=30 --png=docs/bench_train.png --json=runs/bench_train.json
python tools/bench_train.py --simulated_step_ms=30 --steps=100 --repeats=5  # tighter medians (~10 min)
python tools/bench_train.py --workloads=wav --repeats=1 --steps=20 --simulated_step_ms=30  # smoke

(times on 2 CPU cores.) Prints a table of every workload, then PASS/MISS per
target: training steps/s of each engine fed by each input pipeline, the input
stall fraction, and the ratio to the limit. Is the input ever the bottleneck?

On generated data (tools/benchdata.py: 1 s 16 kHz mono PCM16 WAVs; 5 s 44.1
kHz stereo FLAC), trains the same model for the same --steps with each engine
(keras: the Keras engine's own loop, engines.keras_loop.fit; estimator:
model_to_estimator of the same compiled model, its input_fn called in the
Estimator's graph), fed by each pipeline:

  naive          shuffle of decoded waveforms, no prefetch (the user's original)
  best_practice  shuffle of file names, one fused parallel map, prefetch(1)
  audioclf_cold  audioclf.input_fn on an empty cache (the first epoch decodes and fills it)
  audioclf_warm  audioclf.input_fn on a filled cache
  limit          the same batches already in memory, repeated: what the step alone allows
  limit_unmetered  the limit without the stall meter (every other run carries it)

Columns: steps/s after --warmup_steps; the input stall fraction
(audioclf.engines.stall.StallMeter, the meter both engines train with); the ratio of
steps/s to the limit of the same engine in the same round; the steps timed;
the first step's seconds (pipeline start-up, plus tracing in Keras: compare
it within an engine). Targets:

  warm_vs_limit   audioclf warm >= 0.95 x the limit's steps/s, with each engine
  cold_vs_best    audioclf cold steps/s >= best practice's, with each engine; or cold
                  stalls < 1% of the time: it keeps up with the step, and the two
                  rates differ by noise only (run a shorter --simulated_step_ms,
                  e.g. 5, to see them apart when the input is the bottleneck)
  engines_agree   Estimator and Keras steps/s within 10% of each other on audioclf warm
  meter_cost      the limit with the stall meter >= 0.97 x the limit without it
                  (limit_unmetered): the meter adds no measurable cost

--simulated_step_ms=N replaces the model by a tiny one whose training step
waits N ms in time.sleep (inside a tf.numpy_function, which releases the GIL),
so the step costs no CPU: it stands in for an accelerator, and the CPU is left
to the input pipeline. Without it (0) the real audioclf.build_model model
trains on the CPU, and the pipeline competes with it for the same cores; the
bench then defaults to --model_args=width=16 (the demo preset's) to keep a default run
short, and any audioclf flag applies (--model, --batch_size, ...).

Runs alternate: every round runs each engine with each pipeline, in a rotated
order, --repeats times; the table shows medians, and ratios are medians of
ratios within one round, so a noisy machine's slow drifts cancel. The two
baselines decode every epoch and so run at one rate throughout: each of their
runs stops after --max_seconds of measured steps (the "steps" column says how
many it timed), which keeps FLAC's default run within minutes. Every other
run trains all --steps. Progress goes to stderr. With --measured, the report
and the results also go to docs/measured/bench_train.md and .json
(tools/measured.py).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import statistics
import sys
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402
import tensorflow as tf  # noqa: E402
from tqdm import tqdm  # noqa: E402

import audioclf  # noqa: E402
from audioclf import engines as engines_lib  # noqa: E402
from audioclf.data import fill as fill_lib  # noqa: E402
from audioclf.data import store as store_lib  # noqa: E402
from audioclf.commands import flags as command_flags  # noqa: E402
from audioclf.data import manifest as manifest_lib  # noqa: E402
from audioclf.model import build as models  # noqa: E402
from audioclf.compat import keras  # noqa: E402
from audioclf.engines.clock import EstimatorClockHook, StepClock  # noqa: E402
from audioclf.engines import keras_loop  # noqa: E402
from audioclf.engines.stall import EstimatorStallHook, StallMeter  # noqa: E402
import benchdata  # noqa: E402  (tools/ is on sys.path when this file runs as a script)
import measured  # noqa: E402

FLAGS = flags.FLAGS
ENGINES = ("keras", "estimator")
PIPELINES = ("naive", "best_practice", "audioclf_cold", "audioclf_warm", "limit", "limit_unmetered")
UNMETERED = "limit_unmetered"  # The limit without the stall meter: what the meter costs.
TARGET_WARM_RATIO = 0.95
TARGET_ENGINES_GAP = 0.10
TARGET_METER_RATIO = 0.97  # The meter may cost no more than the noise between runs here (~2%).
TIE_STALL = 0.01  # Below this input-stall fraction a pipeline keeps up with the step.
MIN_MEASURED_STEPS = 5  # A run cut short by --max_seconds still times this many steps.
# Pipelines that decode every epoch run at one rate throughout, so a few
# seconds of steps measure it; the others change rate (a cold cache's first
# epoch decodes, later ones read), so they always run every step.
CAPPED = ("naive", "best_practice")


def define_flags() -> None:
  command_flags.define_flags()  # batch_size, model, model_args, sample_rate, clip_seconds, ...
  # The real model at the library's default width takes seconds a step on 2
  # cores; the demo preset's width keeps a default run within minutes.
  FLAGS.set_default("model_args", "width=16")
  flags.DEFINE_float("simulated_step_ms", 0.0, "Replace the model by a training step that waits "
                     "this long without using the CPU (an accelerator's step); 0: the real model.")
  flags.DEFINE_integer("steps", 50, "Training steps of every run.")
  flags.DEFINE_integer("warmup_steps", 2, "First steps of a run left out of steps/s and the stall "
                       "(tracing, thread start-up); few, so a cold cache's first epoch counts.")
  flags.DEFINE_float("max_seconds", 4.0, f"Stop a run of {' or '.join(CAPPED)} after this many "
                     f"seconds of measured steps (at least {MIN_MEASURED_STEPS} of them); 0: "
                     "always run all --steps.")
  flags.DEFINE_integer("limit_batches", 8, "Distinct in-memory batches the limit pipeline repeats.")
  benchdata.define_flags(PIPELINES, 1600, "1 s 16 kHz mono WAV files (an epoch: "
                         "n_wav/batch_size steps, so the default run crosses epoch boundaries).")
  flags.DEFINE_list("engines", list(engines_lib.available()), "Engines to run (default: those this "
                    "stack runs; the Estimator needs the legacy stack).")
  flags.DEFINE_string("png", None, "Also draw steps/s relative to the limit to this PNG file.")
  flags.DEFINE_bool("measured", False, "Also write the report to docs/measured/bench_train.md "
                    "(and .json), headed by the date, machine, load and command.")


@dataclasses.dataclass
class Run:
  steps_per_s: float
  stall_fraction: float
  measured_steps: int  # Steps after the warm-up that steps/s and the stall cover.
  first_step_s: float
  step_s: list[float]  # Every step's seconds, begin to end, warm-up included (for a closer look).


# --- The models: the real one, or a step that only waits.


class _Wait(keras.layers.Layer):
  """Passes its input through after waiting `ms` in time.sleep, which releases the GIL."""

  def __init__(self, ms: float, **kwargs):
    super().__init__(**kwargs)
    self.ms = ms

  def call(self, x):
    seconds = self.ms / 1000.0
    y = tf.numpy_function(lambda a: (time.sleep(seconds), a)[1], [x], x.dtype, stateful=True)
    return tf.ensure_shape(y, x.shape)

  def get_config(self):
    return {**super().get_config(), "ms": self.ms}


def simulated_model(params: audioclf.Params, num_classes: int, step_ms: float) -> keras.Model:
  """Takes the same {"waveform": [batch, clip_samples]} input; its step is a wait and a tiny Dense."""
  waveform = keras.Input([params.clip_samples], name=models.INPUT_NAME)
  x = _Wait(step_ms, name="accelerator_step")(waveform)
  x = keras.layers.Lambda(lambda w: w[:, :64], name="first_samples")(x)
  probabilities = keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
  return keras.Model(models.inputs(waveform), probabilities, name="simulated")


def make_model(params: audioclf.Params, engine: str) -> keras.Model:
  """A new compiled model: compile_model picks the engine's optimizer family, as training does."""
  num_classes = len(benchdata.LABELS)
  if FLAGS.simulated_step_ms > 0:
    model = simulated_model(params, num_classes, FLAGS.simulated_step_ms)
  else:
    model = models.build_model(params, num_classes)
  return models.compile_model(model, params.replace(engine=engine))


# --- One timed run per engine: audioclf's own Keras loop, or its Estimator hooks.


def _clock(max_seconds: float) -> StepClock:
  return StepClock(FLAGS.warmup_steps, max_seconds=max_seconds, min_steps=MIN_MEASURED_STEPS,
                   keep_durations=True)


def _run(clock: StepClock, meter: StallMeter) -> Run:
  if not clock.steps:
    raise RuntimeError("a run needs more --steps than --warmup_steps")
  return Run(clock.steps_per_sec(), meter.fraction, clock.steps, clock.first_step_s,
             [round(s, 4) for s in clock.durations])


def train_keras(params: audioclf.Params, build: Callable[[], tf.data.Dataset], steps: int,
                max_seconds: float = 0.0, metered: bool = True, extra_callbacks=()) -> Run:
  """The Keras engine's loop (engines.keras_loop.fit) on build()'s dataset for `steps` steps."""
  model = make_model(params, "keras")
  meter = StallMeter(warmup_steps=FLAGS.warmup_steps)
  clock = _clock(max_seconds)
  ds = build()
  keras_loop.fit(model, meter.attach(ds) if metered else ds, steps_per_epoch=steps,
                 meter=meter if metered else None, clocks=[clock], callbacks=extra_callbacks)
  return _run(clock, meter)


def train_estimator(params: audioclf.Params, build: Callable[[], tf.data.Dataset], steps: int,
                    max_seconds: float = 0.0, metered: bool = True) -> Run:
  """model_to_estimator of the same compiled model; build() runs inside the Estimator's graph."""
  model = make_model(params, "estimator")
  meter = StallMeter(warmup_steps=FLAGS.warmup_steps)
  clock = _clock(max_seconds)
  hooks = [EstimatorClockHook([clock])] + ([EstimatorStallHook(meter)] if metered else [])
  with benchdata.scratch_estimator(model, FLAGS.out_dir) as estimator:
    estimator.train(lambda: meter.attach(build()) if metered else build(), max_steps=steps,
                    hooks=hooks)
  return _run(clock, meter)


TRAIN = {"keras": train_keras, "estimator": train_estimator}


def _cold_root() -> str:
  return os.path.join(FLAGS.out_dir, "cold-train")


def bench_workload(name: str, params: audioclf.Params, bar: tqdm) -> dict[tuple[str, str], list]:
  """Runs every selected engine x pipeline --repeats times on one workload.

  Returns:
    {(engine, pipeline): [Run of each round]}.
  """
  workload = benchdata.WORKLOADS[name]
  n_files = FLAGS.n_wav if workload.ext == "wav" else FLAGS.n_flac
  if n_files < params.batch_size:
    raise app.UsageError(f"--n_{workload.ext}={n_files} is less than one batch")
  root = os.path.join(FLAGS.out_dir, f"{name}-{n_files}")
  files, labels = _make_files(name, workload, root, n_files)
  data_params = benchdata.audioclf_params(
      root, os.path.join(FLAGS.out_dir, "cache-train", f"{name}-{n_files}"), params)
  manifest = manifest_lib.load(data_params)
  _fill_warm_cache(name, data_params, manifest)
  cold_dirs: list[str] = []
  builders = _pipelines(workload, files, labels, data_params, manifest, cold_dirs)
  engines = [e for e in ENGINES if e in FLAGS.engines]
  # A process's first training run pays one-off costs (TF runtime, kernels,
  # thread pools); pay them untimed, once per engine.
  for engine in engines:
    t = time.perf_counter()
    TRAIN[engine](data_params, builders["limit"], FLAGS.warmup_steps + 2)
    benchdata.log(f"[{name}] {engine}: first run, untimed ({time.perf_counter() - t:.1f} s)")
  return _rounds(name, engines, data_params, builders, cold_dirs, bar)


def _make_files(name: str, workload, root: str, n_files: int) -> tuple[list, list]:
  """The workload's generated files under root (benchdata.make_files), with a progress bar."""
  t = time.perf_counter()
  with tqdm(total=n_files, desc=f"{name}: files", file=sys.stderr, leave=False) as b:
    files, labels = benchdata.make_files(workload, root, n_files, progress=b.update)
  benchdata.log(f"[{name}] {n_files} files in {root} ({time.perf_counter() - t:.1f} s)")
  return files, labels


def _fill_warm_cache(name: str, data_params: audioclf.Params,
                     manifest: manifest_lib.Manifest) -> None:
  """Fills the warm cache once, untimed (eval mode: one pass that writes the split)."""
  t = time.perf_counter()
  fill_lib.fill(data_params, ("train",), manifest)
  benchdata.log(f"[{name}] warm cache filled ({time.perf_counter() - t:.1f} s)")


def _pipelines(workload, files: list, labels: list, data_params: audioclf.Params,
               manifest: manifest_lib.Manifest,
               cold_dirs: list[str]) -> dict[str, Callable[[], tf.data.Dataset]]:
  """Each pipeline's dataset builder; audioclf_cold's caches into the last of cold_dirs."""
  # The limit repeats batches audioclf's warm pipeline cut, held in memory.
  limit = [(f["waveform"].numpy(), y.numpy()) for f, y in
           audioclf.input_fn(data_params, "train", manifest=manifest).take(FLAGS.limit_batches)]
  return {
      "naive": lambda: benchdata.naive_input_fn(files, labels, workload, data_params),
      "best_practice": lambda: benchdata.best_practice_input_fn(files, labels, workload,
                                                                data_params),
      "audioclf_cold": lambda: audioclf.input_fn(data_params.replace(cache_dir=cold_dirs[-1]),
                                                 "train", manifest=manifest),
      "audioclf_warm": lambda: audioclf.input_fn(data_params, "train", manifest=manifest),
      "limit": lambda: benchdata.repeated_batches_input_fn(limit),
      UNMETERED: lambda: benchdata.repeated_batches_input_fn(limit),
  }


def _rounds(name: str, engines: list[str], data_params: audioclf.Params,
            builders: dict[str, Callable[[], tf.data.Dataset]], cold_dirs: list[str],
            bar: tqdm) -> dict[tuple[str, str], list[Run]]:
  """--repeats rounds of every engine with every selected pipeline: {(engine, pipeline): runs}."""
  order = [p for p in PIPELINES if p in FLAGS.pipelines]
  runs: dict[tuple[str, str], list[Run]] = {(e, p): [] for e in engines for p in order}
  for r in range(FLAGS.repeats):
    # Rotate engines and pipelines so none always follows the same neighbour.
    for engine in engines[r % len(engines):] + engines[:r % len(engines)]:
      for p in order[r % len(order):] + order[:r % len(order)]:
        bar.set_description(f"{name} round {r + 1}/{FLAGS.repeats}: {engine} {p}")
        runs[(engine, p)].append(_timed_run(name, r, engine, p, data_params, builders, cold_dirs))
        keras.backend.clear_session()
        gc.collect()
        bar.update(1)
  return runs


def _timed_run(name: str, r: int, engine: str, p: str, data_params: audioclf.Params,
               builders: dict[str, Callable[[], tf.data.Dataset]], cold_dirs: list[str]) -> Run:
  """Round r's run of `engine` fed by pipeline p, logged; audioclf_cold's on a new cache."""
  if p == "audioclf_cold":
    # A new folder each time, deleted only at the end (see bench_input.py: ext4 without
    # a journal creates files slowly right after mass deletes).
    cold_dirs.append(os.path.join(_cold_root(), f"{name}-{engine}-{r}"))
  t = time.perf_counter()
  run = TRAIN[engine](data_params, builders[p], FLAGS.steps,
                      FLAGS.max_seconds if p in CAPPED else 0.0, metered=p != UNMETERED)
  if p == "audioclf_cold":
    # The split is written in the background as epoch 1 ends: let that end
    # here, outside any timing, rather than in the next run's.
    store_lib.Store.for_params(data_params.replace(cache_dir=cold_dirs[-1])).wait_for_writers()
  benchdata.log(f"[{name}] round {r + 1} {engine:9s} {p:15s}: {run.steps_per_s:6.2f} steps/s, "
                f"stall {run.stall_fraction:.3f} over {run.measured_steps} steps, first step "
                f"{run.first_step_s:.2f} s ({time.perf_counter() - t:.1f} s)")
  return run


def summarize(name: str, runs: dict[tuple[str, str], list[Run]]) -> tuple[list[dict], list[dict]]:
  """Table rows and target verdicts of one workload: medians over rounds, ratios within rounds."""
  rows = [_row(name, engine, p, rs, runs.get((engine, "limit")))
          for (engine, p), rs in runs.items()]
  return rows, _targets(name, runs, {(row["engine"], row["pipeline"]): row for row in rows})


def _median_ratio(runs: list[Run], to: list[Run]) -> float:
  """The median over rounds of runs' steps/s over those of `to` in the same round."""
  return statistics.median(a.steps_per_s / b.steps_per_s for a, b in zip(runs, to))


def _row(name: str, engine: str, p: str, rs: list[Run], limit: list[Run] | None) -> dict:
  """The table's row of one engine and pipeline: medians over its rounds."""
  return {
      "workload": name, "engine": engine, "pipeline": p,
      "steps_per_s": statistics.median(r.steps_per_s for r in rs),
      "stall_fraction": statistics.median(r.stall_fraction for r in rs),
      "ratio_to_limit": _median_ratio(rs, limit) if limit else None,
      "measured_steps": min(r.measured_steps for r in rs),
      "first_step_s": statistics.median(r.first_step_s for r in rs),
      "runs": [dataclasses.asdict(r) for r in rs],
  }


def _targets(name: str, runs: dict[tuple[str, str], list[Run]],
             by: dict[tuple[str, str], dict]) -> list[dict]:
  """The verdict on each target whose runs are there; `by` holds the rows by (engine, pipeline)."""
  def verdict(target: str, value: float, want: str, passed: bool) -> dict:
    return {"workload": name, "target": target, "value": value, "want": want, "pass": passed}

  targets = []
  for engine in ENGINES:
    if (engine, "audioclf_warm") in by and (engine, "limit") in by:
      v = by[(engine, "audioclf_warm")]["ratio_to_limit"]
      targets.append(verdict(f"warm_vs_limit[{engine}]", v, f">= {TARGET_WARM_RATIO}",
                             v >= TARGET_WARM_RATIO))
    if (engine, "audioclf_cold") in runs and (engine, "best_practice") in runs:
      v = _median_ratio(runs[(engine, "audioclf_cold")], runs[(engine, "best_practice")])
      # Where cold keeps up with the step (it stalls under 1% of the time),
      # steps/s is the step's own rate and the ratio only measures noise:
      # no input pipeline could make that run faster.
      stall = by[(engine, "audioclf_cold")]["stall_fraction"]
      targets.append(verdict(f"cold_vs_best[{engine}]", v,
                             f">= 1.0, or cold stall < {TIE_STALL:.0%} (keeps up with the step)",
                             v >= 1.0 or stall < TIE_STALL))
    if (engine, "limit") in runs and (engine, UNMETERED) in runs:
      v = _median_ratio(runs[(engine, "limit")], runs[(engine, UNMETERED)])
      targets.append(verdict(f"meter_cost[{engine}]", v,
                             f">= {TARGET_METER_RATIO} (limit with / without the stall meter)",
                             v >= TARGET_METER_RATIO))
  if ("keras", "audioclf_warm") in runs and ("estimator", "audioclf_warm") in runs:
    v = _median_ratio(runs[("estimator", "audioclf_warm")], runs[("keras", "audioclf_warm")])
    targets.append(verdict("engines_agree", v,
                           f"estimator/keras in [{1 - TARGET_ENGINES_GAP:.2f}, "
                           f"{1 / (1 - TARGET_ENGINES_GAP):.2f}]",
                           1 - TARGET_ENGINES_GAP <= v <= 1 / (1 - TARGET_ENGINES_GAP)))
  return targets


def _model_description(params: audioclf.Params) -> str:
  if FLAGS.simulated_step_ms > 0:
    return f"simulated {FLAGS.simulated_step_ms:g} ms step (no CPU)"
  return f"real model {params.model} {params.model_args.flag()} on the CPU"


def heading(params: audioclf.Params) -> str:
  """The line above the table: what trained, on what, over how many rounds."""
  return (f"audioclf training input: {_model_description(params)}; batch {params.batch_size}, "
          f"{FLAGS.steps} steps ({FLAGS.warmup_steps} warm-up); {os.cpu_count()} CPU cores, "
          f"TF {tf.__version__}; medians of {FLAGS.repeats} rounds")


def report(rows: list[dict], targets: list[dict], head: str) -> str:
  """The table and the target verdicts under `head`, as printed (and written with --measured).

  Args:
    rows: summarize()'s rows, of every workload.
    targets: summarize()'s verdicts, of every workload.
    head: the line above the table (heading()).

  Returns:
    Markdown: `head`, then the table and PASS/MISS lines in a fenced block.
  """
  lines = [head, "```",
           f"{'workload':8s}  {'engine':9s}  {'pipeline':15s}  {'steps/s':>7s}  {'stall':>5s}  "
           f"{'vs limit':>8s}  {'steps':>5s}  {'1st step s':>10s}"]
  for row in rows:
    ratio = row["ratio_to_limit"]
    stall = "-" if row["pipeline"] == UNMETERED else format(row["stall_fraction"], "5.3f")
    lines.append(f"{row['workload']:8s}  {row['engine']:9s}  {row['pipeline']:15s}  "
                 f"{row['steps_per_s']:7.2f}  {stall:>5s}  "
                 f"{(f'{ratio:.3f}' if ratio is not None else '-'):>8s}  "
                 f"{row['measured_steps']:5d}  {row['first_step_s']:10.2f}")
  lines.append("")
  lines += [f"{'PASS' if t['pass'] else 'MISS'}  {t['workload']:5s} {t['target']:22s} "
            f"{t['value']:.3f} (want {t['want']})" for t in targets]
  return "\n".join(lines + ["```"])


def write_page(text: str, rows: list[dict], targets: list[dict], load_before: str,
               **settings) -> str:
  """Writes report()'s `text` and the results to bench_train's page (tools/measured.py).

  Args:
    text: report()'s markdown.
    rows: summarize()'s rows.
    targets: summarize()'s verdicts.
    load_before: the load average when the run started.
    **settings: what the run was (steps, the simulated step, ...), into the JSON.

  Returns:
    The page's path.
  """
  return measured.write("bench_train", "Training input (tools/bench_train.py)",
                        measured.command(), "\n" + text,
                        {"bench": "bench_train", **settings, "rows": rows, "targets": targets},
                        load_before)


def draw(rows: list[dict], path: str, params: audioclf.Params) -> None:
  """A small bar chart: steps/s relative to the limit, per pipeline and engine, one panel a workload."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  workloads = list(dict.fromkeys(r["workload"] for r in rows))
  width = max(4.2 * len(workloads), 6.5)  # Room for the title over a single panel too.
  fig, axes = plt.subplots(1, len(workloads), figsize=(width, 3.0), sharey=True, squeeze=False)
  for ax, name in zip(axes[0], workloads):
    mine = [r for r in rows if r["workload"] == name and r["ratio_to_limit"] is not None]
    pipelines = list(dict.fromkeys(r["pipeline"] for r in mine))
    engines = list(dict.fromkeys(r["engine"] for r in mine))
    width = 0.8 / max(1, len(engines))
    for i, engine in enumerate(engines):
      values = {r["pipeline"]: r["ratio_to_limit"] for r in mine if r["engine"] == engine}
      xs = [j + (i - (len(engines) - 1) / 2) * width for j in range(len(pipelines))]
      ax.bar(xs, [values.get(p, 0.0) for p in pipelines], width, label=engine)
    ax.axhline(TARGET_WARM_RATIO, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(pipelines)))
    ax.set_xticklabels([p.replace("audioclf_", "audioclf\n").replace("_", "\n") for p in pipelines],
                       fontsize=7)
    ax.set_title(name, fontsize=9)
    ax.set_ylim(0, 1.1)
  axes[0][0].set_ylabel("steps/s / limit", fontsize=8)
  axes[0][-1].legend(fontsize=7, loc="upper left")
  fig.suptitle(f"{_model_description(params)}, batch {params.batch_size}, {FLAGS.steps} steps, "
               f"medians of {FLAGS.repeats} rounds, {os.cpu_count()} CPU cores", fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=80)
  plt.close(fig)


def _check_flags() -> None:
  """Raises app.UsageError for a flag no run can honour."""
  for flag, known, chosen in (("workloads", benchdata.WORKLOADS, FLAGS.workloads),
                              ("engines", ENGINES, FLAGS.engines),
                              ("pipelines", PIPELINES, FLAGS.pipelines)):
    for value in chosen:
      if value not in known:
        raise app.UsageError(f"--{flag}: unknown {value!r}; known: {list(known)}")
  if not 1 <= FLAGS.warmup_steps < FLAGS.steps:
    raise app.UsageError("--warmup_steps must be at least 1 and less than --steps")
  for engine in FLAGS.engines:
    engines_lib.get(engine)  # The Estimator on the current stack: say which stack it needs.


def bench(params: audioclf.Params) -> tuple[list[dict], list[dict]]:
  """Every workload's runs, summarized: (rows, targets)."""
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  total = len(FLAGS.workloads) * len(FLAGS.engines) * len(FLAGS.pipelines) * FLAGS.repeats
  return benchdata.each_workload(
      FLAGS.workloads, lambda name, bar: summarize(name, bench_workload(name, params, bar)),
      total, _cold_root())


def main(argv):
  del argv
  _check_flags()
  logging.set_verbosity(logging.WARNING)  # The Estimator logs every session start.
  tf.get_logger().setLevel("ERROR")
  params = command_flags.params_from_flags()
  start, load_before = time.perf_counter(), measured.load()
  rows, targets = bench(params)
  text = report(rows, targets, heading(params))
  print("\n" + text.replace("```\n", "").replace("\n```", ""))
  print(f"({time.perf_counter() - start:.0f} s)")
  if FLAGS.png:
    draw(rows, FLAGS.png, params)
    print(f"wrote {FLAGS.png}")
  settings = dict(simulated_step_ms=FLAGS.simulated_step_ms, steps=FLAGS.steps,
                  warmup_steps=FLAGS.warmup_steps, max_seconds=FLAGS.max_seconds)
  if FLAGS.json:
    benchdata.write_json(FLAGS.json, params, rows, targets, **settings)
  if FLAGS.measured:
    print("wrote", write_page(text, rows, targets, load_before, model=_model_description(params),
                              repeats=FLAGS.repeats, cpu_count=os.cpu_count(),
                              tf_version=tf.__version__, params=params.to_dict(), **settings))


if __name__ == "__main__":
  define_flags()
  app.run(main)
