"""audioclf's errors met in tf.data's Python calls, carried out of the graph as values.

An exception raised inside tf.numpy_function reaches TensorFlow's runtime as
a status holding its Python traceback, which every op_kernel warning then
prints (TF_CPP_MIN_LOG_LEVEL 0 or 1). `numpy_call` catches a bad audio file
and a cache that cannot be written, returns the error's text beside the
result, and fails the graph with an assertion that holds it; `message`
reads it back where TensorFlow's error reaches Python, whatever escaping
TensorFlow applied to the assertion's text.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from audioclf.data import cache_format, decode

# The errors a user fixes (a file, a disk): carried as values, named in one line.
EXPECTED = (decode.BadAudioError, cache_format.CacheWriteError)
_TAG = "audioclf-error:"
_TAGGED = re.compile(_TAG + r"([0-9a-f]+)")


def numpy_call(fn: Callable, args: Sequence, dtype: tf.DType, stateful: bool = True) -> tf.Tensor:
  """tf.numpy_function(fn, args, dtype), with EXPECTED errors raised as a failed assertion.

  The result is not computed past the check: a failed call fails the graph
  with the error's text (and `message`'s tagged copy of it) and no traceback.
  """

  def call(*values):
    try:
      return np.asarray(fn(*values), dtype.as_numpy_dtype), b""
    except EXPECTED as e:
      text = str(e)
      return (np.zeros(0, dtype.as_numpy_dtype),
              f"{text} {_TAG}{text.encode('utf-8').hex()}".encode("utf-8"))

  out, error = tf.numpy_function(call, list(args), [dtype, tf.string], stateful=stateful)
  check = tf.debugging.Assert(tf.equal(tf.strings.length(error), 0), [error])
  with tf.control_dependencies([check]):
    return tf.identity(out)


def message(text: str) -> str:
  """The text of the error `numpy_call` carried in TensorFlow's error message `text`, else `text`."""
  match = _TAGGED.search(text)
  return bytes.fromhex(match.group(1)).decode("utf-8") if match else text
