"""An opt-in pytest plugin: the time each test spends in garbage collections, and who stalls in a long one.

  PYTHONPATH=tests tools/test.sh -p gc_probe   # writes $AUDIOCLF_GC_PROBE_DIR (default /tmp/audioclf-gc-probe)

For each test process (each xdist worker), `<worker>-<pid>.json` lists
[seconds in collections, full collections, seconds of the test, objects tracked at its end,
test id, CPU seconds of the collecting thread in them] per test, and
`stacks-<pid>.txt` holds every thread's Python stack whenever one collection
runs past LONG_S (faulthandler): a collection that walks under a million
objects takes well under a second, so a long one is spending its time in
finalizers (a wall time far above its CPU time: waiting for something).

Two more, to bisect and to name what is slow to die:
  AUDIOCLF_GC_PROBE_EACH=file (or test)  a timed full collection after each test file (or
      test), in two halves (finalizers, then frees), with the types of its garbage:
      `<worker>-<pid>-collects.json`; which file leaves the slow garbage.
  AUDIOCLF_GC_PROBE_GDB=<seconds>  gdb's native stacks of the process (`native-<pid>.txt`)
      whenever a collection outlasts that many seconds: a C++ destructor has no Python frame.

Why it exists: on the current stack, one worker of tools/test.sh spent 70 s
of its ~450 s in collections, most of it in one or two full collections of
25-53 s each (inside whichever test triggered them: test_imbalance[keras],
test_zoo, test_export), which is most of the swings between runs of the suite.
Those were Keras' fit and evaluate leaving their tf.data iterators in
reference cycles, whose destruction a minute later waited for each
iterator's autotuning thread; engines.keras_loop.passes_released now
destroys them as each pass returns, and no pipeline autotunes
(data/pipeline.py's AUTOTUNE says why: a race in TensorFlow's cancellation).
"""

import collections
import faulthandler
import gc
import json
import mmap
import os
import struct
import subprocess
import sys
import time

import pytest

LONG_S = 4.0
_DIR = os.environ.get("AUDIOCLF_GC_PROBE_DIR", "/tmp/audioclf-gc-probe")
# "file" or "test": a timed full collection after each test file (or test), to tell which one
# leaves the garbage that is slow to collect (see _collect_after).
_EACH = os.environ.get("AUDIOCLF_GC_PROBE_EACH", "")
_collects = []
_spent = {"start": 0.0, "seconds": 0.0, "full": 0, "cpu_start": 0.0, "cpu": 0.0}
_rows = []
_stacks = None
_shared = {}  # "page": where the running collection's start goes, for the gdb watcher.


def _on_collection(phase, info):
  if phase == "start":
    _spent["start"], _spent["cpu_start"] = time.perf_counter(), time.thread_time()
    faulthandler.dump_traceback_later(LONG_S, repeat=False, file=_stacks)
    if "page" in _shared:
      _shared["page"][:8] = struct.pack("d", time.monotonic())
    return
  faulthandler.cancel_dump_traceback_later()
  if "page" in _shared:
    _shared["page"][:8] = bytes(8)
  _spent["seconds"] += time.perf_counter() - _spent["start"]
  _spent["cpu"] += time.thread_time() - _spent["cpu_start"]
  _spent["full"] += info.get("generation") == 2


def pytest_configure(config):
  global _stacks  # pylint: disable=global-statement
  os.makedirs(_DIR, exist_ok=True)
  _stacks = open(os.path.join(_DIR, f"stacks-{os.getpid()}.txt"), "w")  # pylint: disable=consider-using-with
  _start_native_watch()
  gc.callbacks.append(_on_collection)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
  seconds, full, cpu, start = (_spent["seconds"], _spent["full"], _spent["cpu"],
                               time.perf_counter())
  yield
  if _EACH == "test" or (_EACH == "file" and (nextitem is None or nextitem.path != item.path)):
    _collect_after(item.nodeid if _EACH == "test" else item.nodeid.split("::")[0])
  _rows.append((round(_spent["seconds"] - seconds, 2), _spent["full"] - full,
                round(time.perf_counter() - start, 2), len(gc.get_objects()), item.nodeid,
                round(_spent["cpu"] - cpu, 2)))


def _collect_after(label):
  """A full collection in two timed halves, and the types of what it found.

  With DEBUG_SAVEALL the collection runs the garbage's finalizers (__del__)
  but keeps the objects (gc.garbage); the second collection frees them: the
  destructors of C and C++ objects run there. The most common types of the
  garbage go with the times, for the slow ones to be named.
  """
  gc.set_debug(gc.DEBUG_SAVEALL)
  start, cpu = time.perf_counter(), time.thread_time()
  gc.collect()
  finalized, finalize_cpu = time.perf_counter() - start, time.thread_time() - cpu
  gc.set_debug(0)
  types = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
  found = len(gc.garbage)
  gc.garbage.clear()
  start = time.perf_counter()
  gc.collect()
  freed = time.perf_counter() - start
  _collects.append({"after": label, "finalize_s": round(finalized, 2),
                    "finalize_cpu_s": round(finalize_cpu, 2), "free_s": round(freed, 2),
                    "garbage": found, "types": types.most_common(40)})


def _start_native_watch():
  """With AUDIOCLF_GC_PROBE_GDB=<seconds>: gdb's native stacks of every collection that outlasts them.

  faulthandler shows Python frames only, and the destructor of a C++ object
  has none. A watcher process (this file run as a script) reads when the
  running collection began from a shared page, and runs gdb on this
  process once that is longer ago than the given seconds.
  """
  seconds = os.environ.get("AUDIOCLF_GC_PROBE_GDB")
  if not seconds:
    return
  path = os.path.join(_DIR, f"collecting-{os.getpid()}")
  with open(path, "wb") as f:
    f.write(bytes(8))
  with open(path, "r+b") as f:
    _shared["page"] = mmap.mmap(f.fileno(), 8)
  out = os.path.join(_DIR, f"native-{os.getpid()}.txt")
  subprocess.Popen([sys.executable, __file__, str(os.getpid()), path, seconds, out],  # pylint: disable=consider-using-with
                   start_new_session=True)


def _watch(pid, path, seconds, out):
  """The watcher's loop, until process `pid` ends."""
  with open(path, "rb") as f:
    page = mmap.mmap(f.fileno(), 8, access=mmap.ACCESS_READ)
  dumped = 0.0
  while True:
    try:
      os.kill(pid, 0)
    except OSError:
      return
    began = struct.unpack("d", page[:8])[0]
    if began and began != dumped and time.monotonic() - began > seconds:
      dumped = began
      with open(out, "a") as f:
        f.write(f"=== collection running for {time.monotonic() - began:.1f} s\n")
        f.flush()
        subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                       stdout=f, stderr=subprocess.STDOUT, check=False)
    time.sleep(0.5)


def pytest_unconfigure(config):  # pylint: disable=unused-argument
  gc.callbacks.remove(_on_collection)
  if _collects:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(_DIR, f"{worker}-{os.getpid()}-collects.json"), "w") as f:
      json.dump(_collects, f, indent=1)
  if _rows:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(_DIR, f"{worker}-{os.getpid()}.json"), "w") as f:
      json.dump(_rows, f)


if __name__ == "__main__":
  _watch(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4])
