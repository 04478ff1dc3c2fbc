"""audioclf train: trains a model into --model_dir, resuming what is there.

  python -m audioclf train --flagfile=flags/demo.flags [--engine=keras|estimator]

Prints the final metrics as one line of JSON, last on stdout (audioclf.train
does the same from Python).
"""

from __future__ import annotations

from typing import Optional, Sequence

from audioclf.commands import cli
from audioclf.commands import flags as command_flags


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.engines.train import train
  from audioclf.model import model_dir
  # pylint: enable=g-import-not-at-top
  metrics = train(command_flags.params_from_flags())
  print(model_dir.summary_line(metrics), flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_flags()
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
