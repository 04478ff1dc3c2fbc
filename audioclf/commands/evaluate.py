"""audioclf evaluate: a model_dir's best (else latest) checkpoint, or a SavedModel, on one split.

  python -m audioclf evaluate --model_dir=runs/demo/current/keras [--split=test] [--data_dir=...]
  python -m audioclf evaluate --model_dir=runs/demo/current/keras --split=test --group_by=speaker
  python -m audioclf evaluate --saved_model=runs/demo/current/keras/export --split=test
  python -m audioclf evaluate --model_dir=M --background=data/speech_words/_background_noise_ \
      --split=test --target_false_accepts_per_hour=1

Writes the evaluation report (audioclf.deploy.report) to <model_dir>/eval_<split>/,
prints its per-class table (and with --group_by the weakest groups), and loss,
accuracy and the checkpoint's step as one line of JSON last. With --background
(a speech_embedding model_dir), the streaming detector's false accepts per hour
and false-reject rate instead, with the DET curve (audioclf.streaming.background).
"""

from __future__ import annotations

from typing import Optional, Sequence

from absl import flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.deploy.evaluate import evaluate
  from audioclf.model import model_dir
  # pylint: enable=g-import-not-at-top
  if FLAGS.background:
    return _background()
  results = evaluate(FLAGS.model_dir, FLAGS.split, command_flags.params_for_model_dir(),
                     saved_model=FLAGS.saved_model, report_dir=FLAGS.report_dir,
                     checkpoint=FLAGS.checkpoint, group_by=FLAGS.group_by)
  report = results.pop("report")
  print(report.pop("text"), flush=True)
  print(f"report: {results['report_dir']}", flush=True)
  print(model_dir.summary_line(results), flush=True)


def _background() -> None:
  """--background: the streaming detector's errors (audioclf.streaming.background)."""
  # pylint: disable=g-import-not-at-top
  from audioclf.model import model_dir
  from audioclf.params import ParamError
  from audioclf.streaming import background
  # pylint: enable=g-import-not-at-top
  if FLAGS.saved_model:
    raise ParamError("--background evaluates a model_dir's streaming form, not a --saved_model")
  report = background.evaluate_background(
      FLAGS.model_dir, FLAGS.background, command_flags.params_for_model_dir(), FLAGS.split,
      FLAGS.target_false_accepts_per_hour, FLAGS.checkpoint, FLAGS.report_dir,
      _snr_range(FLAGS.keyword_snr_db))
  print(background.table(report), flush=True)
  print(f"report: {report['report_dir']}", flush=True)
  print(model_dir.summary_line({k: v for k, v in report.items() if k != "curve"}), flush=True)


def _snr_range(values: Sequence[str]) -> Optional[tuple[float, float]]:
  """--keyword_snr_db as (low, high); None when empty.

  Raises:
    ParamError: more than two values, or one that is no number.
  """
  from audioclf.params import ParamError  # pylint: disable=g-import-not-at-top
  try:
    levels = [float(v) for v in values]
  except ValueError:
    raise ParamError(f"--keyword_snr_db={','.join(values)}: numbers in dB") from None
  if len(levels) > 2:
    raise ParamError(f"--keyword_snr_db={','.join(values)}: one level, or min,max")
  return (min(levels), max(levels)) if levels else None


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_model_dir_flags()
  flags.mark_flags_as_mutual_exclusive(["model_dir", "saved_model"], required=True)
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
