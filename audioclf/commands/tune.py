"""audioclf tune: a keras-tuner search over audioclf's own model builder and warm input_fn.

  python -m audioclf tune --flagfile=flags/tune.flags

What a search leaves in --tune_dir is in audioclf.tuning.search; a rerun with
the same folder resumes it. Prints the table of trials, then one line of JSON.
"""

from __future__ import annotations

from typing import Optional, Sequence

from audioclf.commands import cli
from audioclf.commands import flags as command_flags


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.model import model_dir
  from audioclf.tuning.search import tune
  # pylint: enable=g-import-not-at-top
  summary = tune(command_flags.params_from_flags())
  print(model_dir.summary_line(summary), flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_flags()
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
