r"""audioclf launch: a training cluster on this host, to try multi-worker training before taking it to several machines.

  Keras (MultiWorkerMirroredStrategy):
    python -m audioclf launch --workers=2 -- --flagfile=flags/demo.flags --engine=keras
  Estimator (chief, worker, ps and an evaluator):
    python -m audioclf launch --workers=2 --ps=1 --evaluator -- \
        --flagfile=flags/demo.flags --engine=estimator

One `python -m audioclf.commands.train <train flags>` process per task, each
with a loopback TF_CONFIG (free ports on 127.0.0.1), their output prefixed
`[worker:1]` and so on (audioclf.distributed.launcher). Exits with the chief's
code and prints the chief's summary line last, as `audioclf train` does; a
failing task stops all the others, and so do Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

from absl import app, flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags
from audioclf.distributed import cluster as cluster_lib
from audioclf.distributed import launcher

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> int:
  cluster = cluster_lib.loopback_cluster(FLAGS.workers, FLAGS.ps)
  command = [sys.executable, "-m", FLAGS.module, *argv[1:]]
  runner = launcher.Cluster(cluster, command, evaluator=FLAGS.evaluator)
  code = runner.run()
  # The chief's last line is the run's JSON summary: print it bare, last, for scripts.
  last = runner.last_lines.get(runner.chief, "")
  try:
    json.loads(last)
  except ValueError:
    last = ""
  if code == 0 and last:
    print(last, flush=True)
  return code


def run(argv: Optional[Sequence[str]] = None) -> None:
  # No TensorFlow here: the tasks load it. absl's own app.run, not cli.run.
  command_flags.define_launch_flags()
  argv = list(sys.argv if argv is None else argv)
  cli.exit_if_help(argv, __doc__)
  app.run(main, argv=argv)


if __name__ == "__main__":
  run()
