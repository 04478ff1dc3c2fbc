"""python -m audioclf.cache: fill every split ahead of time, say what is cached, verify it, prune it.

  python -m audioclf.cache --flagfile=flags/demo.flags            # fill every split
  python -m audioclf.cache --flagfile=... --info                  # what is cached
  python -m audioclf.cache --cache_dir=... --verify               # check every byte of every split
  python -m audioclf.cache --cache_dir=... --prune_days=30        # delete what went unused 30 days
"""

from __future__ import annotations

import json
import time
from typing import Sequence

from absl import flags

from audioclf import cli
from audioclf.data import fill as fill_lib
from audioclf.data import store as store_lib


def main(argv: Sequence[str]) -> None:
  del argv
  f = flags.FLAGS
  params = cli.params_from_flags()
  if f.verify:
    report = store_lib.verify(params.cache_dir)
    print(json.dumps(report))
    if report["damaged"]:
      raise SystemExit(f"audioclf: {len(report['damaged'])} damaged splits (their markers are "
                       "removed: the next run fills them again)")
    return
  if f.info:
    print(json.dumps(store_lib.info(store_lib.Store.for_params(params))))
    return
  if f.prune_days is not None:
    print(json.dumps(store_lib.prune(params.cache_dir, f.prune_days)))
    return
  start = time.time()
  report = fill_lib.fill(params, progress=True)
  print(json.dumps({"seconds": round(time.time() - start, 2), **report,
                    **store_lib.info(store_lib.Store.for_params(params))}))


def run() -> None:
  cli.define_flags()
  flags.DEFINE_bool("info", False, "Print what is cached instead of filling it.")
  flags.DEFINE_bool("verify", False, "Instead of filling, check every byte of every split under "
                    "--cache_dir against its checksums; a damaged split loses its marker.")
  flags.DEFINE_float("prune_days", None, "Instead of filling, delete the splits and entries "
                     "of every dataset under --cache_dir that no run has used for this many days.")
  cli.run(main)
