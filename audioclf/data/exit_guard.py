"""A process that exits with an audioclf pipeline still running ends, neither hanging nor aborting.

The hazard: a pipeline with Python in it (the cold pass's soundfile decode
and split write, a cold run's later epochs; `tf.numpy_function` calls) keeps
calling Python from tf.data's threads for as long as its iterator lives.
When a script ends with one alive (it took a batch and returned, an
exception unwound it, Ctrl-C), the iterator is destroyed only while the
interpreter finalizes: its destructor waits for the calls in flight, and
those can no longer take the GIL. Python up to 3.13 ends such a thread with
pthread_exit, which unwinds through a C++ `noexcept` frame (an abort, rc
134, "terminate called without an active exception") or leaves the call
unfinished, so the destructor waits for ever (a hang).

The remedy: `install()` registers an `atexit` hook, and atexit hooks run
before finalization, while every thread can still run Python. The hook
destroys every live tf.data iterator there and then, so each one's in-flight
calls finish and no new ones start. The process then exits with the code it
was going to exit with. Every pipeline with Python in it installs it: the
cold pass and the warm training cut (one numpy call per batch); only the
native read (evaluation, `native_read=True`) runs without Python.

An iterator has two kinds of holders: its Python object (the hook deletes
its resource), and the frames of an uncaught exception. Ctrl-C lands while
the main thread waits in TensorFlow for a batch, so the KeyboardInterrupt's
traceback runs through the frames that passed the iterator's handle to the
op; Python keeps that exception (`sys.last_exc`) until finalization, and with
it the handle. The hook clears those frames first. In case anything else
still holds a pipeline, a watchdog that needs no GIL (faulthandler's thread)
ends the process if finalization outlasts EXIT_GRACE_S.
"""

from __future__ import annotations

import atexit
import faulthandler
import functools
import gc
import os
import sys
import traceback

from audioclf.compat import private

# How long finalization may take once the hook ran; only a holder this module
# does not know of can make it longer.
EXIT_GRACE_S = 20.0


@functools.cache
def install() -> None:
  """Registers the hook, once per process."""
  atexit.register(_at_exit)


def _at_exit() -> None:
  close_live_iterators()
  _arm_watchdog()


def close_live_iterators() -> int:
  """Destroys the resource of every live eager tf.data iterator; returns how many.

  See compat.private.release_live_iterators: TensorFlow has no public way.
  """
  clear_reported_exception_frames()
  gc.collect()  # Iterators only garbage holds go first, the ordinary way.
  closed = private.release_live_iterators()
  if closed:  # Their handles, where cycles hold them; none closed, nothing new to free (0.2 s).
    gc.collect()
  return closed


def clear_reported_exception_frames() -> None:
  """Drops the local variables of every frame the uncaught exception (and its causes) unwound.

  Python has printed it already; its frames' variables (a handle tensor
  among them) would otherwise live until finalization.
  """
  pending = [getattr(sys, name, None) for name in ("last_exc", "last_value")]
  seen = set()
  while pending:
    exc = pending.pop()
    if not isinstance(exc, BaseException) or id(exc) in seen:
      continue
    seen.add(id(exc))
    traceback.clear_frames(exc.__traceback__)
    pending += [exc.__cause__, exc.__context__]


def _arm_watchdog() -> None:
  """Ends the process (rc 1) if finalization outlasts EXIT_GRACE_S: better than a hang.

  faulthandler's timer runs on a C thread of its own, which needs no GIL, so
  it fires even where every Python thread is stuck. It prints nothing.
  """
  try:
    sink = open(os.devnull, "w")  # pylint: disable=consider-using-with
    faulthandler.dump_traceback_later(EXIT_GRACE_S, exit=True, file=sink)
  except (OSError, ValueError, RuntimeError):
    pass  # No watchdog: the hook above is what matters.
