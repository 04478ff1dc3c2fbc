"""Training input from a tf.data service on loopback, next to the same pipeline in process.

  python tools/bench_service.py [--n_wav=2000 --step_ms=30 --steps=150]
  python tools/bench_service.py --measured   # also to docs/measured/bench_service.md

Generates --n_wav 1 s PCM16 WAVs, fills the cache, then consumes training
batches behind a simulated step of --step_ms (a sleep: the pipeline runs
meanwhile, as it does behind a real step) from: the local pipeline, and the
service (a dispatcher and 1, then 2, workers started with `python -m
audioclf service`, all on 127.0.0.1). Prints examples/s side by side, and the
same without a step (the input's own ceiling), and one JSON line; progress goes
to stderr. On one host the workers share the trainer's cores, so the service can
only cost: it pays where its workers run on other hosts, with cores of their own.
With --measured, the table and the JSON also go to docs/measured/bench_service.md
and .json (tools/measured.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchdata  # pylint: disable=g-import-not-at-top,wrong-import-position

from audioclf import params as params_lib  # pylint: disable=wrong-import-position
from audioclf.distributed import cluster  # pylint: disable=wrong-import-position
from audioclf.data import pipeline  # pylint: disable=wrong-import-position
from audioclf.data import manifest as manifest_lib  # pylint: disable=wrong-import-position

import measured  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS


def define_flags() -> None:
  flags.DEFINE_integer("n_wav", 2000, "1 s 16 kHz PCM16 WAV files to generate.")
  flags.DEFINE_integer("batch_size", 64, "Examples per batch.")
  flags.DEFINE_float("step_ms", 30.0, "Simulated training step, in milliseconds.")
  flags.DEFINE_integer("steps", 150, "Batches per measurement (after 10 of warm-up).")
  flags.DEFINE_list("workers", ["1", "2"], "Service worker counts to measure.")
  flags.DEFINE_string("out_dir", "/tmp/audioclf_bench_service", "Generated files and cache.")
  flags.DEFINE_bool("measured", False, "Also write the table to docs/measured/bench_service.md "
                    "(and .json), headed by the date, machine, load and command.")


def examples_per_sec(ds, steps: int, step_s: float, batch_size: int) -> float:
  """Examples/s of `steps` batches of `ds` behind a sleep of `step_s` each, after 10 of warm-up."""
  it = iter(ds)
  for _ in range(10):  # Warm-up: graph, threads, the service's job.
    next(it)
  start = time.perf_counter()
  for _ in range(steps):
    next(it)
    if step_s:
      time.sleep(step_s)
  return steps * batch_size / (time.perf_counter() - start)


@contextlib.contextmanager
def service(flagfile: str, workers: int):
  """A dispatcher and `workers` workers on 127.0.0.1, as subprocesses; yields its address."""
  port, *ports = cluster.free_ports(1 + workers)
  # Loopback here, but TensorFlow's servers listen on every interface: the flag says so.
  command = [sys.executable, "-m", "audioclf", "service"]
  procs = [subprocess.Popen([*command, "dispatcher", f"--port={port}", "--allow_remote_clients"],
                            stdout=subprocess.PIPE, text=True)]
  try:
    for worker_port in ports:
      procs.append(subprocess.Popen(
          [*command, "worker", f"--dispatcher=127.0.0.1:{port}", f"--port={worker_port}",
           "--worker_host=127.0.0.1", "--allow_remote_clients", f"--flagfile={flagfile}"],
          stdout=subprocess.PIPE,
          text=True))
    for proc in procs[1:]:
      for line in proc.stdout:
        if "registered" in line:
          break
      else:
        raise RuntimeError("a service worker ended before it registered")
    yield f"grpc://127.0.0.1:{port}"
  finally:
    for proc in reversed(procs):  # Workers first, while their dispatcher still answers.
      proc.terminate()
      try:
        proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        print(f"(pid {proc.pid} outlived SIGTERM by 60 s: killed)", file=sys.stderr)
        proc.kill()
        proc.wait()


def prepare() -> tuple[params_lib.Params, str]:
  """Generates the WAVs, fills the cache and writes the workers' flagfile: (params, flagfile)."""
  data_dir = os.path.join(FLAGS.out_dir, "wav")
  benchdata.make_files(benchdata.WORKLOADS["wav"], data_dir, FLAGS.n_wav)
  params = benchdata.audioclf_params(data_dir, os.path.join(FLAGS.out_dir, "cache")).replace(
      batch_size=FLAGS.batch_size)
  pipeline.fill_cache(params, manifest_lib.load(params), splits=("train",))
  flagfile = os.path.join(FLAGS.out_dir, "service.flags")
  params_lib.to_flagfile(params, flagfile)
  return params, flagfile


def measure(params: params_lib.Params, flagfile: str) -> list[dict]:
  """Examples/s of the pipeline in process, then from the service with each of --workers.

  Returns:
    A row per input: {"input", "workers" (None: in process), "examples_per_s_stepped",
    "examples_per_s_free"}.
  """
  inputs = [("in process", None)] + [(f"service, {n} worker{'s' * (int(n) > 1)}", int(n))
                                     for n in FLAGS.workers]
  rows = []
  for name, workers in inputs:
    with (service(flagfile, workers) if workers else contextlib.nullcontext()) as address:
      ds = pipeline.input_fn(params.replace(data_service=address), "train")
      stepped = examples_per_sec(ds, FLAGS.steps, FLAGS.step_ms / 1000, FLAGS.batch_size)
      free = examples_per_sec(ds, FLAGS.steps, 0, FLAGS.batch_size)
    rows.append({"input": name, "workers": workers, "examples_per_s_stepped": stepped,
                 "examples_per_s_free": free})
    print(f"{name}: {stepped:,.0f} examples/s behind the step, {free:,.0f} without",
          file=sys.stderr, flush=True)
  return rows


def report(rows: list[dict], step_ms: float, batch_size: int, cores: int) -> str:
  """measure()'s rows as a table in a fenced block, with what caps them under it."""
  lines = ["```", f"{'input':<22}{'behind a ' + format(step_ms, 'g') + ' ms step':>22}"
                  f"{'no step':>12}   examples/s"]
  lines += [f"{r['input']:<22}{r['examples_per_s_stepped']:>22,.0f}{r['examples_per_s_free']:>12,.0f}"
            for r in rows]
  lines += [f"(a step of {step_ms:g} ms caps it at {batch_size / step_ms * 1000:,.0f}; "
            f"{cores} cores shared by trainer and workers)", "```"]
  return "\n".join(lines)


def write_page(text: str, record: dict, load_before: str) -> str:
  """Writes report()'s `text` and `record` to bench_service's page (tools/measured.py); its path."""
  body = ("\nTraining input from a tf.data service on loopback next to the same pipeline in "
          "process. On one host the workers share the trainer's cores, so the service can only "
          "cost here.\n\n" + text)
  return measured.write("bench_service", "The tf.data service on loopback "
                        "(tools/bench_service.py)", measured.command(), body, record, load_before)


def main(argv):
  del argv
  load_before = measured.load()
  rows = measure(*prepare())
  text = report(rows, FLAGS.step_ms, FLAGS.batch_size, os.cpu_count())
  print(text.replace("```\n", "").replace("\n```", ""))
  record = {"bench": "bench_service", "rows": rows, "step_ms": FLAGS.step_ms,
            "steps": FLAGS.steps, "batch_size": FLAGS.batch_size, "n_wav": FLAGS.n_wav,
            "cpu_count": os.cpu_count()}
  print(json.dumps(record))
  if FLAGS.measured:
    print("wrote", write_page(text, record, load_before), file=sys.stderr)


if __name__ == "__main__":
  define_flags()
  app.run(main)
