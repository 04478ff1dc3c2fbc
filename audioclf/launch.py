"""python -m audioclf.launch --workers=2 [--ps=1 --evaluator] -- <train flags>

Runs a training cluster on this host, to try multi-worker training before
taking it to several machines: one `python -m audioclf.train <train flags>`
process per task, each with a loopback TF_CONFIG (free ports on 127.0.0.1),
their output prefixed `[worker:1]` and so on. Exits with the chief's code and
prints the chief's summary line last, as `audioclf.train` does; a failing
task stops all the others, and so does Ctrl-C.

  Keras (MultiWorkerMirroredStrategy):
    python -m audioclf.launch --workers=2 -- --flagfile=flags/demo.flags --engine=keras
  Estimator (chief, worker, ps and an evaluator):
    python -m audioclf.launch --workers=2 --ps=1 --evaluator -- \
        --flagfile=flags/demo.flags --engine=estimator
"""

from __future__ import annotations

import json
import sys

from absl import app, flags

from audioclf import cluster as cluster_lib

_WORKERS = flags.DEFINE_integer("workers", 2, "Training tasks (the chief counts as one).",
                                lower_bound=1)
_PS = flags.DEFINE_integer("ps", 0, "Parameter server tasks (the Estimator's cluster); 0 for "
                           "Keras' MultiWorkerMirroredStrategy.", lower_bound=0)
_EVALUATOR = flags.DEFINE_bool("evaluator", False, "Also run an evaluator task, which evaluates "
                               "each checkpoint as it appears (the Estimator engine).")
_MODULE = flags.DEFINE_string("module", "audioclf.train", "The module every task runs.")


def main(argv):
  cluster = cluster_lib.loopback_cluster(_WORKERS.value, _PS.value)
  command = [sys.executable, "-m", _MODULE.value, *argv[1:]]
  runner = cluster_lib.Cluster(cluster, command, evaluator=_EVALUATOR.value)
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


def run():
  app.run(main)


if __name__ == "__main__":
  run()
