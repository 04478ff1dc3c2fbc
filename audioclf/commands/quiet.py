"""Quiet by default: a command prints audioclf's own lines, progress and results, not the stacks' chatter.

What is dropped at the default verbosity, and why it cannot be switched off
at its source:

  - TensorFlow's C++ start-up lines (`All log messages before
    absl::InitializeLog() ...`, `oneDNN custom operations are on ...`, CPU
    feature notes), twice per process on TF 2.21 whatever TF_CPP_MIN_LOG_LEVEL
    says (tensorflow/tensorflow#102212): printed to file descriptor 2 while
    `import tensorflow` runs, so that import runs with fd 2 captured, and the
    capture is replayed without them.
  - TensorFlow Lite's C++ lines while `export --format=tflite` converts and
    checks (`fully_quantize: 0, inference_type: 6, ...` from the quantizer,
    `Created TensorFlow Lite XNNPACK delegate for CPU.` from the
    interpreter; on TF 2.15 a summary of the ops left as constants, ~40
    lines a conversion), printed to fd 2 whatever the log level: the export
    runs with fd 2 captured the same way (`chatter_dropped`).
  - TensorFlow's later C++ INFO and WARNING lines (TF_CPP_MIN_LOG_LEVEL=2,
    unless already set).
  - TensorFlow's Python INFO and WARNING records (the Estimator's step logs,
    deprecation notices, saver notes): the `tensorflow` logger is set to ERROR.
  - Keras 2's UserWarnings about its own deprecated internals, which
    model_to_estimator calls (set_learning_phase, state_updates).
  - INFO records that TensorFlow and Keras log through absl (saver notes);
    audioclf's own INFO lines stay, printed bare (`audioclf: cached ...`),
    without absl's time, thread and file prefix.

AUDIOCLF_VERBOSE=1 in the environment, or absl's --verbosity=1 (or more),
brings all of it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from typing import Sequence

from absl import flags
from absl import logging as absl_logging

VERBOSE_ENV = "AUDIOCLF_VERBOSE"
_THEIRS = re.compile(r"[/\\](tensorflow|tensorflow_estimator|keras|tf_keras|keras_tuner)[/\\]")
_CHATTER = re.compile(
    r"All log messages before absl::InitializeLog|oneDNN custom operations are on|"
    r"cpu_feature_guard|To enable the following instructions|This TensorFlow binary is optimized|"
    r"rebuild TensorFlow with the appropriate compiler flags|Unable to register cu\w+ factory|"
    r"computation placer already registered|TF-TRT Warning|Could not find cuda drivers|"
    r"successful NUMA node read|Created TensorFlow Lite XNNPACK delegate|"
    r"fully_quantize: \d+, inference_type|"
    # TF 2.15's converter: op_stat_pass's summary of the ops left as constants, a block of lines.
    r"op_stat_pass\.cc|^Summary on the non-converted ops:|^-{5,}\s*$|"
    r"^ \* (Accepted dialects|Non-Converted Ops|\d+ \w+ ops)|^- [\w.]+: +\d+ occurrences|"
    r"^\s*\((\w*: \d+(, )?)+\)\s*$|^\s*$|"
    r"delegate that only supports static-sized tensors")


def verbose(argv: Sequence[str] = ()) -> bool:
  """Whether the user asked for everything: AUDIOCLF_VERBOSE, or --verbosity above 0."""
  if os.environ.get(VERBOSE_ENV, "") not in ("", "0"):
    return True
  if flags.FLAGS.is_parsed() and flags.FLAGS.verbosity > 0:  # Inside main: argv lacks the flag.
    return True
  levels = [a.split("=", 1)[1] for a in argv if a.startswith(("--verbosity=", "-v="))]
  return any(level.lstrip("-").isdigit() and int(level) > 0 for level in levels)


def start_tensorflow(argv: Sequence[str] = ()) -> None:
  """Imports TensorFlow (and Keras) with their start-up chatter dropped, unless verbose.

  Where the process imported TensorFlow already (a script that calls a
  command's `run`), its later Python records and Keras' warnings are
  quieted all the same.
  """
  if verbose(argv):
    import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    return
  # TensorFlow's C++ INFO and WARNING lines after start-up (graph passes, session notes).
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if "tensorflow" not in sys.modules:
    _import_without_chatter()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel("ERROR")
  warnings.filterwarnings("ignore", category=UserWarning, module=r"keras(\.|$)")


def _import_without_chatter() -> None:
  """Imports TensorFlow and Keras with their start-up lines dropped (`chatter_dropped`)."""
  with chatter_dropped():
    import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import keras  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import


@contextlib.contextmanager
def chatter_dropped(argv: Sequence[str] = ()):
  """Runs the block with fd 2 captured, then replays it without _CHATTER (all of it when verbose).

  For the C++ lines no switch silences. What else the block prints to
  stderr comes out too, after the block.
  """
  if verbose(argv):
    yield
    return
  with tempfile.TemporaryFile(mode="w+b") as capture:
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(capture.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      capture.seek(0)
      kept = [line for line in capture.read().decode(errors="replace").splitlines(True)
              if not _CHATTER.search(line)]
      sys.stderr.write("".join(kept))
      sys.stderr.flush()


class _OwnLines(logging.Filter):
  """Drops INFO records of TensorFlow and Keras; the rest pass."""

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.WARNING:
      return True
    return not _THEIRS.search(record.pathname)


class _BareFormatter(logging.Formatter):
  """audioclf's INFO lines as they are; a warning or error led by its level."""

  def format(self, record: logging.LogRecord) -> str:
    message = record.getMessage()
    if record.levelno >= logging.WARNING:
      return f"{record.levelname.lower()}: {message}"
    return message


def quiet_logging(argv: Sequence[str] = ()) -> None:
  """Inside app.run (absl's handler installed): audioclf's own lines, bare. No-op when verbose."""
  if verbose(argv):
    return
  handler = absl_logging.get_absl_handler()
  handler.addFilter(_OwnLines())
  handler.setFormatter(_BareFormatter())
