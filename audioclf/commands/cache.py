"""audioclf cache: fill every split ahead of time, say what is cached, verify it, prune it.

  python -m audioclf cache --flagfile=flags/demo.flags            # fill every split
  python -m audioclf cache --flagfile=... --info                  # what is cached
  python -m audioclf cache --cache_dir=... --verify               # check every byte of the cache
  python -m audioclf cache --cache_dir=... --prune_days=30        # delete what went unused 30 days
"""

from __future__ import annotations

import json
import time
from typing import Optional, Sequence

from absl import flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.data import fill as fill_lib
  from audioclf.data import cache_maintenance
  from audioclf.data import store as store_lib
  # pylint: enable=g-import-not-at-top
  del argv
  f = flags.FLAGS
  params = command_flags.params_from_flags()
  if f.verify:
    report = cache_maintenance.verify(params.cache_dir)
    print(json.dumps(report))
    if report["damaged"] or report["damaged_entries"]:
      raise SystemExit(f"audioclf: {len(report['damaged'])} damaged splits and "
                       f"{len(report['damaged_entries'])} damaged entries (removed: the next run "
                       "fills them again)")
    return
  if f.info:
    print(json.dumps(cache_maintenance.info(store_lib.Store.for_params(params))))
    return
  if f.prune_days is not None:
    print(json.dumps(cache_maintenance.prune(params.cache_dir, f.prune_days)))
    return
  start = time.time()
  report = fill_lib.fill(params, progress=True)
  print(json.dumps({"seconds": round(time.time() - start, 2), **report,
                    **cache_maintenance.info(store_lib.Store.for_params(params))}))


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_cache_flags()
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
