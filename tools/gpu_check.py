"""Input stall of both engines on a GPU, the Keras path prefetching batches to the device.

  python tools/gpu_check.py                # on a machine with a GPU; prints one JSON line last
  python tools/gpu_check.py --allow_cpu --steps=15 --warmup_steps=5 --model_args=width=8  # smoke test, no GPU

Writes a small WAV workload (tools/benchdata.py), fills audioclf's cache, and
trains the real audioclf model --steps steps with each engine, fed by
audioclf.input_fn (warm cache) and by the same batches from memory (the
limit). Keras fit runs under tf.distribute.OneDeviceStrategy, which
distributes the dataset and so prefetches each batch to the device while the
step before it runs; the Estimator (model_to_estimator) reads a dataset that
ends in tf.data.experimental.prefetch_to_device. Both are what the engines do
with --prefetch_device=auto on a GPU machine. Each run carries the stall
meter both engines train with (audioclf.engines.stall).

Prints one JSON line: per engine, steps/s (time inside measured steps) and
input_stall_fraction for audioclf warm and the limit, and their ratio. With
device prefetch the probe marks a batch when it leaves the host pipeline, so a
step waiting only on the host-to-device copy is not counted as a stall (the
steps/s ratio to the limit still shows it). Without a GPU it prints
"no GPU found: ..." and exits 0, unless --allow_cpu runs the same code on the CPU.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402
import tensorflow as tf  # noqa: E402

import audioclf  # noqa: E402
from audioclf import engines  # noqa: E402
from audioclf.data import fill as fill_lib  # noqa: E402
from audioclf.commands import flags as command_flags  # noqa: E402
from audioclf.data import manifest as manifest_lib  # noqa: E402
from audioclf.model import build as models  # noqa: E402
from audioclf.compat import keras  # noqa: E402
from audioclf.engines import keras_loop  # noqa: E402
from audioclf.engines.stall import EstimatorStallHook, StallMeter  # noqa: E402
import benchdata  # noqa: E402  (tools/ is on sys.path when this file runs as a script)

FLAGS = flags.FLAGS


def define_flags() -> None:
  command_flags.define_flags()  # batch_size, model, model_args, ...
  flags.DEFINE_integer("steps", 60, "Training steps of each run.")
  flags.DEFINE_integer("warmup_steps", 10, "First steps left out of steps/s and the stall.")
  flags.DEFINE_integer("n_files", 640, "1 s 16 kHz mono WAV files to generate.")
  flags.DEFINE_string("out_dir", os.path.join(tempfile.gettempdir(), "audioclf_gpu_check"),
                      "Generated files, cache and scratch model_dirs.")
  flags.DEFINE_bool("allow_cpu", False, "Without a GPU, run on the CPU instead of exiting "
                    "(tests this script; its numbers say nothing about a GPU).")


def _result(meter: StallMeter) -> dict:
  rate = meter.clock.steps_per_sec()  # The meter's clock times the steps after its warm-up.
  return {"steps_per_s": round(rate, 2) if rate else None,
          "input_stall_fraction": round(meter.fraction, 4), "measured_steps": meter.steps}


def train_keras(params, build, device: str) -> dict:
  meter = StallMeter(warmup_steps=FLAGS.warmup_steps)
  # Under a strategy, fit distributes the dataset: its iterator copies the
  # next batch to the device while the current step runs. The probe stays
  # the host pipeline's last transformation (a numpy_function cannot run on
  # the device).
  with tf.distribute.OneDeviceStrategy(device).scope():
    model = models.compile_model(models.build_model(params, len(benchdata.LABELS)), params)
  keras_loop.fit(model, meter.attach(build()), steps_per_epoch=FLAGS.steps, meter=meter)
  return _result(meter)


def train_estimator(params, build, device: str) -> dict:
  meter = StallMeter(warmup_steps=FLAGS.warmup_steps)
  model = models.compile_model(models.build_model(params, len(benchdata.LABELS)),
                               params.replace(engine="estimator"))
  with benchdata.scratch_estimator(model, FLAGS.out_dir) as estimator:
    # As the Estimator engine does: the batches wait on the device.
    estimator.train(lambda: meter.attach(build()).apply(
        tf.data.experimental.prefetch_to_device(device, buffer_size=2)),
                    max_steps=FLAGS.steps, hooks=[EstimatorStallHook(meter)])
  return _result(meter)


TRAIN = {"keras": train_keras, "estimator": train_estimator}


def main(argv):
  del argv
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus and not FLAGS.allow_cpu:
    print(f"no GPU found: tf.config.list_physical_devices('GPU') is empty (TensorFlow "
          f"{tf.__version__}, built with CUDA: {tf.test.is_built_with_cuda()}); nothing to "
          "check here. Run this on a GPU machine, or pass --allow_cpu to test the script.")
    return 0
  if FLAGS.steps <= FLAGS.warmup_steps:
    raise app.UsageError("--steps must exceed --warmup_steps")
  logging.set_verbosity(logging.WARNING)
  device = "/gpu:0" if gpus else "/cpu:0"
  params = command_flags.params_from_flags()
  data_params, manifest = _warm_workload(params)
  pipelines = _pipelines(data_params, manifest)
  results = {"device": device, "gpus": [g.name for g in gpus], "batch_size": params.batch_size,
             "model": params.model, "model_args": dict(params.model_args), "steps": FLAGS.steps,
             "warmup_steps": FLAGS.warmup_steps}
  for engine in engines.available():  # The Estimator runs on the legacy stack only.
    results[engine] = _engine_runs(engine, data_params, pipelines, device)
  print(json.dumps(results), flush=True)
  return 0


def _warm_workload(params: audioclf.Params) -> tuple[audioclf.Params, manifest_lib.Manifest]:
  """Writes the WAV workload and fills its cache: the params and manifest that read it warm."""
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  workload = benchdata.WORKLOADS["wav"]
  root = os.path.join(FLAGS.out_dir, f"wav-{FLAGS.n_files}")
  benchdata.make_files(workload, root, FLAGS.n_files)
  data_params = benchdata.audioclf_params(root, os.path.join(FLAGS.out_dir, "cache"), params)
  manifest = manifest_lib.load(data_params)
  fill_lib.fill(data_params, ("train",), manifest)  # The runs below read it warm.
  return data_params, manifest


def _pipelines(data_params: audioclf.Params, manifest: manifest_lib.Manifest) -> dict:
  """audioclf_warm reads the warm cache; the limit repeats 8 of its batches from memory."""
  batches = [(f["waveform"].numpy(), y.numpy()) for f, y in
             audioclf.input_fn(data_params, "train", manifest=manifest).take(8)]
  return {
      "audioclf_warm": lambda: audioclf.input_fn(data_params, "train", manifest=manifest),
      "limit": lambda: benchdata.repeated_batches_input_fn(batches),
  }


def _engine_runs(engine: str, data_params: audioclf.Params, pipelines: dict, device: str) -> dict:
  """One engine's result on each pipeline, and warm_vs_limit, their steps/s ratio."""
  runs = {}
  for name, build in pipelines.items():
    runs[name] = TRAIN[engine](data_params.replace(engine=engine), build, device)
    print(f"[gpu_check] {engine} {name}: {runs[name]}", file=sys.stderr, flush=True)
    keras.backend.clear_session()
  warm, limit = runs["audioclf_warm"]["steps_per_s"], runs["limit"]["steps_per_s"]
  runs["warm_vs_limit"] = round(warm / limit, 3) if warm and limit else None
  return runs


if __name__ == "__main__":
  define_flags()
  app.run(main)
