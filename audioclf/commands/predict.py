"""audioclf predict: labels for audio files, and the segments where labels are heard in long ones.

  python -m audioclf predict --model_dir=runs/demo/current/keras clip.wav more_clips/ [--output=out.csv]

A file of at most one clip prints `path<TAB>label<TAB>probability`; a longer
one is classified in sliding windows (--hop_seconds) streamed from disk, and
each segment where a label is heard (audioclf.deploy.segments) prints as
`path<TAB>start<TAB>end<TAB>label<TAB>peak probability`, in seconds. --output
also writes every result as CSV (file,start,end,label,probability; no start or
end for a short file) or JSON; --save_probabilities=probs.npz every class's
probability for each short file (what `audioclf migrate --report` compares
across stacks). One line of JSON ends the output: how many files, clips and
segments, and the checkpoint used (--checkpoint: the best by default) and its step.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from typing import Optional, Sequence

from absl import app, flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.deploy import predict as predict_lib
  from audioclf.deploy import segments
  from audioclf.model import model_dir
  # pylint: enable=g-import-not-at-top
  if len(argv) < 2:
    raise app.UsageError("give audio files or folders to classify")
  params = command_flags.params_for_model_dir()
  # Chosen once: both passes below use the same one, even if training keeps another meanwhile.
  chosen = model_dir.choose_checkpoint(FLAGS.model_dir, FLAGS.checkpoint)
  files = predict_lib.audio_files(argv[1:])
  long_files = [f for f in files if segments.is_long(f, params)]
  short = [f for f in files if f not in set(long_files)]
  results = []
  if short:
    short, probs, labels = predict_lib.probabilities(FLAGS.model_dir, short, params, chosen.path)
    for path, label, probability in predict_lib.top_labels(short, probs, labels):
      print(f"{path}\t{label}\t{probability:.4f}", flush=True)
      results.append({"file": path, "label": label, "probability": probability})
    if FLAGS.save_probabilities:
      predict_lib.save_probabilities(FLAGS.save_probabilities, short, probs, labels)
  if long_files:
    for result in segments.detect(FLAGS.model_dir, long_files, params, FLAGS.hop_seconds,
                                  FLAGS.threshold, FLAGS.background_labels, chosen.path):
      for s in result["segments"]:
        print(f"{result['file']}\t{s.start:.2f}\t{s.end:.2f}\t{s.label}\t{s.peak:.4f}",
              flush=True)
      results.append(dict(result, segments=[dataclasses.asdict(s) for s in result["segments"]]))
  if FLAGS.output:
    _write_output(FLAGS.output, results)
  print(model_dir.summary_line({
      "model_dir": FLAGS.model_dir, **chosen.record(), "files": len(files), "clips": len(short),
      "skipped": len(files) - len(long_files) - len(short), "long_files": len(long_files),
      "segments": sum(len(r.get("segments", ())) for r in results),
      "output": FLAGS.output, "probabilities": FLAGS.save_probabilities}), flush=True)


def _write_output(path: str, results: list[dict]) -> None:
  """Every file's label or segments, as CSV or JSON by the file's extension."""
  if path.endswith(".json"):
    with open(path, "w") as f:
      json.dump({"files": results}, f, indent=2)
      f.write("\n")
    return
  if not path.endswith(".csv"):
    raise ValueError(f"the output must be a .csv or .json file, got {path!r}")
  with open(path, "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["file", "start", "end", "label", "probability"])
    for result in results:
      if "segments" not in result:
        out.writerow([result["file"], "", "", result["label"], f"{result['probability']:.4f}"])
      for s in result.get("segments", ()):
        out.writerow([result["file"], f"{s['start']:.3f}", f"{s['end']:.3f}", s["label"],
                      f"{s['peak']:.4f}"])


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_model_dir_flags()
  flags.mark_flag_as_required("model_dir")
  cli.run(main, argv, __doc__, arguments=True)


if __name__ == "__main__":
  run()
