"""Streaming keyword spotting's cost per hop: the streaming step against the whole clip model every hop.

  python tools/bench_streaming.py --measured        # a minute or two on one core
  python tools/bench_streaming.py --model_dir=runs/demo/current/pretrained --hops=100
  python tools/bench_streaming.py --quality --measured   # the detector's quality (tools/stream_quality.py)
  python tools/bench_streaming.py --quality --seed=1 --runs_dir=runs/seed1   # another training seed

Each hop is 80 ms of audio (1280 samples at 16 kHz). Rows, on one CPU thread:

  streaming (TF)       StreamingModel.fast_step: only what 8 new mel frames add (audioclf.streaming;
                       XLA-compiled on the current stack)
  streaming (TFLite)   the same step exported (--format=tflite_streaming, float), one invoke a hop
  sliding window (TF)  the clip model (pad_seconds=0) on the last window of audio, every hop:
                       the same outputs, each hop recomputing all 196 frames and 16 embeddings
  sliding window (TFLite)  that clip model as TFLite (float), one invoke a hop

Real-time factor: a hop's CPU time over its 80 ms. Target: the streaming step at most a fifth
of the sliding window's, in the same runtime. The model is --model_dir's, else the preset's architecture with
untrained head weights (the cost does not depend on them). --measured writes
docs/measured/bench_streaming.md (tools/measured.py); one JSON line ends stdout.

--quality measures the detector instead (tools/stream_quality.py): keywords found and detections
elsewhere in 10 minutes of noise with unseen voices' keywords in it, for listen, the streaming
TFLite float and int8; --measured writes docs/measured/bench_streaming_quality.md.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from absl import app, flags

import measured
import stream_quality

FLAGS = flags.FLAGS
HOP_MS = 80.0


def define_flags() -> None:
  flags.DEFINE_string("model_dir", None, "A speech_embedding model_dir (default: the preset's "
                      "architecture, head untrained).")
  flags.DEFINE_integer("hops", 300, "Hops timed per round.")
  flags.DEFINE_integer("rounds", 3, "Rounds; the median is reported.")
  flags.DEFINE_integer("threads", 1, "CPU threads TensorFlow and TFLite may use.")
  flags.DEFINE_bool("measured", False, "Write docs/measured/bench_streaming.md (with --quality, "
                    "bench_streaming_quality.md).")
  flags.DEFINE_bool("quality", False, "Measure the detector on a 10-minute stream instead of the "
                    "cost per hop (tools/stream_quality.py).")
  flags.DEFINE_string("runs_dir", "runs/bench_streaming", "--quality without --model_dir: where "
                      "the preset is trained.")
  flags.DEFINE_integer("seed", 0, "--quality without --model_dir: the preset's training --seed.")


def models():
  """(streaming model, the sliding window as a TF function of [1, window], as TFLite)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from audioclf import Params, compat
  from audioclf.model import build
  from audioclf.model import model_dir as model_dir_lib
  from audioclf.streaming import model as streaming
  # pylint: enable=g-import-not-at-top
  if FLAGS.model_dir:
    model, params, labels = model_dir_lib.load_model(FLAGS.model_dir)
  else:
    params = Params(model="speech_embedding", clip_seconds=1.0,
                    model_args={"head": "conv", "width": 64, "pad_seconds": 0.5})
    labels = [f"word{i}" for i in range(10)]
    model = build.build_model(params, len(labels))
  stream = streaming.StreamingModel(model, labels)
  pad = float(params.model_args.get("pad_seconds", 0.5))
  window = build.build_model(params.replace(
      clip_seconds=params.clip_seconds + 2 * pad,
      model_args=dict(params.model_args, pad_seconds=0.0)), len(labels))
  window.set_weights(model.get_weights())
  sliding = tf.function(lambda audio: window(build.inputs(audio), training=False))
  frozen = compat.constant_call(window)
  converter = tf.lite.TFLiteConverter.from_concrete_functions([tf.function(
      lambda audio: frozen(build.inputs(audio))).get_concrete_function(
          tf.TensorSpec([1, stream.window_samples], tf.float32))])
  return stream, sliding, converter.convert()


def timed(step, hops) -> float:
  """Median over rounds of the CPU microseconds per hop of `step` over `hops`."""
  for hop in hops[:10]:
    step(hop)  # Traced and warm before the clock starts.
  rounds = []
  for _ in range(FLAGS.rounds):
    began = time.process_time()
    for hop in hops:
      step(hop)
    rounds.append(1e6 * (time.process_time() - began) / len(hops))
  return statistics.median(rounds)


def measure() -> list[dict]:
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  from audioclf.streaming import tflite
  # pylint: enable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
  stream, sliding, sliding_tflite = models()
  hops = [h[None] for h in tflite.check_audio(FLAGS.hops)]
  audio = np.zeros((1, stream.window_samples), np.float32)
  window = _interpreter(sliding_tflite)
  rows = [("streaming (TF)", lambda hop: stream.fast_step(hop)),
          ("sliding window (TF)", lambda hop: sliding(tf.constant(audio))),
          ("streaming (TFLite)", _interpreter(tflite.convert(stream, "none"))),
          ("sliding window (TFLite)", lambda hop: window(audio))]
  results = []
  for name, step in rows:
    us = timed(step, hops)
    results.append({"row": name, "us_per_hop": round(us, 1), "rtf": round(us / 1e3 / HOP_MS, 4)})
    print(f"{name}: {us:.0f} us/hop", file=sys.stderr, flush=True)
  return results


def _interpreter(content: bytes):
  """A function that runs one hop through a fresh TFLite interpreter of `content`."""
  from audioclf import compat  # pylint: disable=g-import-not-at-top
  interpreter = compat.tflite_interpreter(content)
  interpreter.allocate_tensors()
  given = interpreter.get_input_details()[0]["index"]
  taken = interpreter.get_output_details()[0]["index"]

  def step(hop):
    interpreter.set_tensor(given, hop)
    interpreter.invoke()
    return interpreter.get_tensor(taken)

  return step


def table(results: list[dict]) -> tuple[str, dict]:
  """The markdown table and the verdicts: each runtime's streaming against its sliding window."""
  by_row = {r["row"]: r["us_per_hop"] for r in results}
  lines = ["| per 80 ms hop | CPU µs | real-time factor | vs its sliding window |",
           "|---|---:|---:|---:|"]
  for r in results:
    runtime = r["row"].split("(")[1]
    lines.append(f"| {r['row']} | {r['us_per_hop']:.0f} | {r['rtf']:.4f} | "
                 f"{r['us_per_hop'] / by_row[f'sliding window ({runtime}']:.3f} |")
  verdict = {}
  for runtime in ("TF", "TFLite"):
    ratio = by_row[f"streaming ({runtime})"] / by_row[f"sliding window ({runtime})"]
    verdict[runtime] = {"ratio": round(ratio, 3), "met": ratio <= 0.2}
  lines += ["", "Target: the streaming step at most 1/5 of the sliding window's: " + "; ".join(
      f"{runtime} {v['ratio']:.3f}, {'met' if v['met'] else 'MISSED'}"
      for runtime, v in verdict.items()) + "."]
  return "\n".join(lines), verdict


def main(argv) -> None:
  del argv
  load_before = measured.load()
  if FLAGS.quality:
    return quality(load_before)
  results = measure()
  text, verdict = table(results)
  print(text)
  record = {"bench": "bench_streaming", "rows": results, "target": verdict,
            "threads": FLAGS.threads, "model_dir": FLAGS.model_dir}
  if FLAGS.measured:
    print("wrote", measured.write(
        "bench_streaming", "Streaming keyword spotting: CPU per hop (tools/bench_streaming.py)",
        measured.command(), f"\n{text}\n\n{NOTES}\n", record, load_before=load_before),
        file=sys.stderr)
  print(json.dumps(record))


def quality(load_before: str) -> None:
  """--quality: the detector on a 10-minute stream (tools/stream_quality.py)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
  log = lambda line: print(line, file=sys.stderr, flush=True)
  model_dir = stream_quality.model(FLAGS.runs_dir, FLAGS.model_dir, log, FLAGS.seed)
  results, held = stream_quality.rows(model_dir, log)
  text, verdict = stream_quality.table(results, held)
  print(text)
  record = {"bench": "bench_streaming_quality", "rows": results, "stream": held,
            "target": verdict, "model_dir": model_dir,
            "seed": None if FLAGS.model_dir else FLAGS.seed}
  if FLAGS.measured:
    print("wrote", measured.write(
        "bench_streaming_quality",
        "Streaming keyword spotting: the detector on a stream (tools/bench_streaming.py --quality)",
        measured.command(), f"\n{text}\n\n{stream_quality.NOTES}\n", record,
        load_before=load_before), file=sys.stderr)
  print(json.dumps(record))


NOTES = ("One CPU thread (--threads). The sliding window computes what the streaming step "
         "computes (the same probabilities, tests/test_streaming.py), from the whole window "
         "of audio each hop; the streaming step keeps each convolution's earlier inputs. "
         "TFLite runs the exported stream.tflite with its state in resource variables.")


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  define_flags()
  app.run(main)
