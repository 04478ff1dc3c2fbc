"""A process that exits with an audioclf pipeline still running ends, neither hanging nor aborting.

The hazard: a pipeline with Python in it (the cold pass's soundfile decode
and split write, a cold run's later epochs; `tf.numpy_function` calls) keeps
calling Python from tf.data's threads for as long as its iterator lives.
When a script ends with one alive (it took a batch and returned, an
exception unwound it, Ctrl-C), the iterator is destroyed only while the
interpreter finalizes: its destructor waits for the calls in flight, and
those can no longer take the GIL (a hang), or are unwound through a C++
`noexcept` frame (an abort, rc 134).

The remedy: `install()` registers an `atexit` hook, and atexit hooks run
before finalization, while every thread can still run Python. The hook
destroys every live tf.data iterator there and then, so each one's in-flight
calls finish and no new ones start. The process then exits with the code it
was going to exit with. Every pipeline with Python in it installs it: the
cold pass and the warm training cut (one numpy call per batch); only the
native read (evaluation, `native_read=True`) runs without Python.
"""

from __future__ import annotations

import atexit
import functools
import gc

from audioclf.compat import private


@functools.cache
def install() -> None:
  """Registers the hook, once per process."""
  atexit.register(close_live_iterators)


def close_live_iterators() -> int:
  """Destroys the resource of every live eager tf.data iterator; returns how many.

  See compat.private.release_live_iterators: TensorFlow has no public way.
  """
  gc.collect()  # Iterators only garbage holds go first, the ordinary way.
  closed = private.release_live_iterators()
  gc.collect()
  return closed
