"""An opt-in pytest plugin: the time each test spends in garbage collections, and who stalls in a long one.

  PYTHONPATH=tests tools/test.sh -p gc_probe   # writes $AUDIOCLF_GC_PROBE_DIR (default /tmp/audioclf-gc-probe)

For each test process (each xdist worker), `<worker>-<pid>.json` lists
[seconds in collections, full collections, seconds of the test, objects tracked at its end,
test id] per test, and `stacks-<pid>.txt` holds every thread's Python stack
whenever one collection runs past LONG_S (faulthandler): a collection that
walks under a million objects takes well under a second, so a long one is
spending its time in finalizers.

Why it exists: on the current stack, one worker of tools/test.sh spent 70 s
of its ~450 s in collections, most of it in one or two full collections of
25-53 s each (inside whichever test triggered them: test_imbalance[keras],
test_zoo, test_export), which is most of the swings between runs of the suite.
"""

import faulthandler
import gc
import json
import os
import time

import pytest

LONG_S = 4.0
_DIR = os.environ.get("AUDIOCLF_GC_PROBE_DIR", "/tmp/audioclf-gc-probe")
_spent = {"start": 0.0, "seconds": 0.0, "full": 0}
_rows = []
_stacks = None


def _on_collection(phase, info):
  if phase == "start":
    _spent["start"] = time.perf_counter()
    faulthandler.dump_traceback_later(LONG_S, repeat=False, file=_stacks)
    return
  faulthandler.cancel_dump_traceback_later()
  _spent["seconds"] += time.perf_counter() - _spent["start"]
  _spent["full"] += info.get("generation") == 2


def pytest_configure(config):
  global _stacks  # pylint: disable=global-statement
  os.makedirs(_DIR, exist_ok=True)
  _stacks = open(os.path.join(_DIR, f"stacks-{os.getpid()}.txt"), "w")  # pylint: disable=consider-using-with
  gc.callbacks.append(_on_collection)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
  seconds, full, start = _spent["seconds"], _spent["full"], time.perf_counter()
  yield
  _rows.append((round(_spent["seconds"] - seconds, 2), _spent["full"] - full,
                round(time.perf_counter() - start, 2), len(gc.get_objects()), item.nodeid))


def pytest_unconfigure(config):  # pylint: disable=unused-argument
  gc.callbacks.remove(_on_collection)
  if _rows:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(_DIR, f"{worker}-{os.getpid()}.json"), "w") as f:
      json.dump(_rows, f)
