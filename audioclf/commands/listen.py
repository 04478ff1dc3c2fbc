"""audioclf listen: keyword spotting on a stream, hop by hop (80 ms), with a speech_embedding model.

  python -m audioclf listen --model_dir=runs/demo/current/pretrained --input=recording.wav
  arecord -f S16_LE -r 16000 -c 1 | python -m audioclf listen --model_dir=M --input=-

Each detection prints as one line of JSON, {"time", "label", "score"}, as it
happens: seconds from the stream's start, and the smoothed probability. A
label fires when its probability, averaged over --smoothing_hops, reaches
--threshold (default: the one `audioclf evaluate --background` kept in the
model_dir's detector.json, else 0.5); then every label rests
--refractory_seconds (--refractory_labels=each: only the one that fired);
--background_labels never fire. The end of the input, Ctrl-C or a closed
output end it with one summary line of JSON (audioclf.streaming).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional, Sequence

from absl import flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> int:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.model import model_dir
  from audioclf.streaming import detector, listen, source
  from audioclf.streaming import model as streaming
  # pylint: enable=g-import-not-at-top
  del argv
  chosen = model_dir.choose_checkpoint(FLAGS.model_dir, FLAGS.checkpoint)
  stream = streaming.StreamingModel.from_model_dir(FLAGS.model_dir, chosen.path)
  settings = dict(detector.read_settings(FLAGS.model_dir) or {})
  settings["background_labels"] = FLAGS.background_labels
  for name in ("threshold", "smoothing_hops", "refractory_seconds", "refractory_labels"):
    if FLAGS[name].present:
      settings[name] = FLAGS[name].value
  if FLAGS.input == "-":
    hops = source.pcm_hops(sys.stdin.buffer, streaming.HOP_SAMPLES)
  else:
    hops = source.file_hops(FLAGS.input, streaming.HOP_SAMPLES, FLAGS.realtime)
  found = listen.make_detector(stream, settings)
  summary = listen.listen(stream, hops, found, _print_detection)
  summary.update(model_dir=FLAGS.model_dir, **chosen.record(), threshold=found.threshold)
  line = model_dir.summary_line(summary)
  if summary["stopped"] == listen.STOPPED_CLOSED:
    # Nothing more can reach stdout; and its buffer must not fail again at exit.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    print(line, file=sys.stderr, flush=True)
  else:
    print(line, flush=True)
  return 0


def _print_detection(found) -> None:
  print(json.dumps({"time": found.time, "label": found.label, "score": found.score}), flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_listen_flags()
  flags.mark_flag_as_required("model_dir")
  flags.mark_flag_as_required("input")
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
