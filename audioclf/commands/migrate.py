"""audioclf migrate: a legacy stack's model_dir (TF 2.15, Keras 2), or a team's Estimator, as Keras 3.

  python -m audioclf migrate --from_model_dir=runs/old --to_model_dir=runs/old-keras3 [--report]
  PYTHONPATH=<their code> python -m audioclf migrate --from_model_dir=<their estimator dir> \\
      --model=team_models:raw_conv --to_model_dir=runs/raw_conv-keras3 [--mapping=map.json] \\
      [--data_dir=... --sample_rate=16000 --clip_seconds=0.25] [--report [--report_inputs=x.npz]]
  PYTHONPATH=<their code> python -m audioclf migrate --from_model_dir=<a model_fn's or canned
      Estimator's dir> [--model=<its Keras 3 rewrite>] --estimator=<module:function returning
      it> --to_model_dir=... [--mapping=map.json] [--report --report_inputs=x.npz]

Without --model, a model_dir audioclf trained (its params.json says the
model); with --model, an Estimator a team's own code built with
model_to_estimator, the model rebuilt by their builder; with --estimator (and
--model for a model_fn's Keras 3 rewrite), an Estimator of no Keras model,
whose checkpoint is name-based (docs/migration.md).
What it carries, and how, is in audioclf.migration: of a model_dir, the
latest checkpoint, which training resumes from, and the best one where the
run kept it (--keep_best), which evaluate, predict and export then take.
Prints what it could not carry and what differs on stderr, the parity
report's table with --report (of a model_dir's best checkpoints by default;
--checkpoint=last), and one line of JSON last.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional, Sequence

from absl import flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags

FLAGS = flags.FLAGS


def _team_estimator() -> dict[str, Any]:
  """migrate_estimator as the flags ask; --report's report under "report"."""
  # pylint: disable=g-import-not-at-top
  from audioclf.migration import parity
  from audioclf.migration.foreign import migrate_estimator
  # pylint: enable=g-import-not-at-top
  params = command_flags.params_from_flags()
  result = migrate_estimator(FLAGS.from_model_dir, FLAGS.to_model_dir,
                             params.model if FLAGS["model"].present else None,
                             params.model_args, FLAGS.mapping, FLAGS.carry_optimizer_state,
                             params, FLAGS.estimator, FLAGS.legacy_python)
  _say("differs", result["differences"])
  if result["model_dir"] is None and result["input"] and len(result["input"]["shape"]) == 1 and (
      result.get("variables") is None):
    _say("note", [f"{params.model}'s model takes raw audio {result['input']['shape']}: add "
                  "--data_dir (or --manifest), --sample_rate and --clip_seconds for a model_dir "
                  "audioclf trains on"])
  if FLAGS.report:
    result["report"] = parity.estimator_report(
        FLAGS.from_model_dir, FLAGS.to_model_dir, FLAGS.report_inputs, split=FLAGS.split,
        probabilities_file=FLAGS.legacy_probabilities, python=FLAGS.legacy_python)
  return result


def _own_model_dir() -> dict[str, Any]:
  """migrate as the flags ask; --report's report under "report"."""
  # pylint: disable=g-import-not-at-top
  from audioclf.migration import parity
  from audioclf.migration.migrate import migrate
  # pylint: enable=g-import-not-at-top
  result = migrate(FLAGS.from_model_dir, FLAGS.to_model_dir, FLAGS.carry_optimizer_state)
  if FLAGS.report:
    params = command_flags.params_for_model_dir(model_dir=FLAGS.to_model_dir)
    result["report"] = parity.parity_report(
        FLAGS.from_model_dir, FLAGS.to_model_dir, params, FLAGS.split,
        FLAGS.legacy_probabilities, FLAGS.legacy_python, FLAGS.checkpoint)
  return result


def _say(what: str, sentences: Sequence[str]) -> None:
  for sentence in sentences:
    print(f"audioclf migrate: {what}: {sentence}", file=sys.stderr, flush=True)


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.migration import parity
  from audioclf.model import model_dir
  # pylint: enable=g-import-not-at-top
  # --model (a Params flag, default cnn) or --estimator given says whose model: else params.json's.
  team = FLAGS["model"].present or FLAGS.estimator
  result = _team_estimator() if team else _own_model_dir()
  _say("not carried", result["not_carried"])
  if "report" in result:
    print(parity.report_table(result["report"]), flush=True)
    print(json.dumps({"report": result["report"]}), flush=True)
  print(model_dir.summary_line(result), flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_migrate_flags()
  flags.mark_flags_as_required(["from_model_dir", "to_model_dir"])
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
