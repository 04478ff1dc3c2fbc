"""audioclf migrate: a legacy stack's model_dir (TF 2.15, Keras 2) as a Keras 3 one.

  python -m audioclf migrate --from_model_dir=runs/old --to_model_dir=runs/old-keras3 [--report]

What it carries, and how, is in audioclf.migration. Prints what it could not
carry on stderr, the parity report's table with --report, and one line of
JSON last.
"""

from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

from absl import app, flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.migration import parity
  from audioclf.migration.migrate import migrate
  from audioclf.model import model_dir
  # pylint: enable=g-import-not-at-top
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  result = migrate(FLAGS.from_model_dir, FLAGS.to_model_dir, FLAGS.carry_optimizer_state)
  for sentence in result["not_carried"]:
    print(f"audioclf migrate: not carried: {sentence}", file=sys.stderr, flush=True)
  if FLAGS.report:
    params = command_flags.params_for_model_dir(model_dir=FLAGS.to_model_dir)
    report = parity.parity_report(FLAGS.from_model_dir, FLAGS.to_model_dir, params, FLAGS.split,
                                  FLAGS.legacy_probabilities, FLAGS.legacy_python)
    print(parity.report_table(report), flush=True)
    print(json.dumps({"report": report}), flush=True)
    result["report"] = report
  print(model_dir.summary_line(result), flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_migrate_flags()
  flags.mark_flags_as_required(["from_model_dir", "to_model_dir"])
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
