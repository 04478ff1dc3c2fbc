"""How every audioclf command runs: absl's app.run, with a user's mistake ended in one line."""

from __future__ import annotations

import atexit
import functools
import gc
import logging as std_logging
import os
import signal
import sys
from typing import Any, Callable, Optional, Sequence

from absl import app

from audioclf.commands import flagfiles, quiet
from audioclf.params import ParamError

# Set to 1 to see the traceback of an error that a command would report as one line.
TRACEBACK_ENV = "AUDIOCLF_TRACEBACK"
INTERRUPTED = ("interrupted: what was written whole is kept (checkpoints, cached clips), nothing "
               "half-written is; run the same command again to resume")


def user_error(error: BaseException) -> Optional[str]:
  """The one line that tells a user what to fix, for an error that needs no traceback; else None.

  Those are invalid params, an unusable data source or model_dir, a bad audio
  file, words synthesize cannot say or write, and a file the system refuses
  (missing, unreadable, disk full). A bad
  file or a full cache disk met inside the tf.data pipeline arrives as
  TensorFlow's error, its message holding the BadAudioError's (or the
  CacheWriteError's) text (`graph_errors`); it is read back from it.
  """
  # Imported here, not at the top: `--help` needs none of it.
  # pylint: disable=g-import-not-at-top
  from audioclf.data import manifest
  from audioclf.synthesis import settings as synthesis

  known = [ParamError, manifest.DataError, synthesis.SynthesisError, OSError]
  # A command that never loaded TensorFlow (synthesize) cannot have met its errors.
  if "tensorflow" in sys.modules:
    import tensorflow as tf

    from audioclf.data import cache_format, decode, graph_errors
    from audioclf.model import model_dir
    if isinstance(error, tf.errors.OpError):
      text = graph_errors.message(error.message)
      error = (decode.BadAudioError.from_text(text)
               or cache_format.CacheWriteError.from_text(text) or error)
    known += [model_dir.ModelDirError, decode.BadAudioError]
  # pylint: enable=g-import-not-at-top
  if isinstance(error, tuple(known)):
    return str(error).removeprefix("audioclf: ")
  return None


def help_text(doc: str) -> str:
  """A command's help: its docstring, then the flags it defined (all live in commands/flags.py)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  return f"{doc.strip()}\n\nflags:\n{flags.FLAGS.module_help('audioclf.commands.flags')}"


def exit_if_help(argv: Sequence[str], doc: str) -> None:
  """Prints the help and exits 0 when `argv` asks for it (before any `--`)."""
  args = list(argv[1:])
  args = args[:args.index("--")] if "--" in args else args
  if any(a in ("-h", "--help", "-?", "--helpshort") for a in args):
    print(help_text(doc), flush=True)
    raise SystemExit(0)


@functools.cache
def exit_without_final_collections() -> None:
  """Makes the interpreter's last collections, as the process exits, skip every object alive then.

  Python ends by collecting garbage (twice) before it tears its modules down,
  walking every object TensorFlow, Keras and the run made: a sizeable part
  of a short command's time. gc.freeze, registered
  here, before anything else of the command's, runs as the last atexit hook
  (they run in reverse): after audioclf.data.exit_guard's hook has
  destroyed the live pipelines and collected the garbage that held any.
  What is alive at that point is torn down with the modules as ever; only
  a reference cycle among those objects is left to the end of the process
  (nothing audioclf writes waits on one: files, checkpoints and summaries
  are closed or flushed by then).
  """
  atexit.register(gc.freeze)


def run(main: Callable[[list[str]], Any], argv: Optional[Sequence[str]] = None,
        doc: str = "", arguments: bool = False, tensorflow: bool = True) -> None:
  """absl's app.run(main, argv) for an audioclf command: errors a user can fix end it in one line.

  `--help` prints `doc` (the command module's docstring) and the command's
  flags, and exits 0. A command that takes no `arguments` (only predict
  takes some: its files) refuses any with app.UsageError before `main` runs.
  A command that needs no `tensorflow` (synthesize) starts without it.

  Such an error (see `user_error`) prints `audioclf: error: <what to fix>`
  on stderr and exits with status 1; Ctrl-C prints `audioclf: interrupted...`
  and exits with 130, as a shell reports it. Set AUDIOCLF_TRACEBACK=1 to get
  their traceback instead. Any other exception keeps its traceback.

  TensorFlow gives its logger a handler of its own when it first logs before
  app.run has installed absl's; records then print through both (every
  Estimator message twice). Inside main, absl's handler alone prints them.
  """
  def main_with_one_log_handler(argv):
    if tensorflow:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      tf_logger = tf.get_logger()
      if tf_logger.propagate and std_logging.getLogger().handlers:
        for handler in list(tf_logger.handlers):
          tf_logger.removeHandler(handler)
    quiet.quiet_logging(argv)
    traceback_wanted = os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    try:
      if not arguments and len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
      return main(argv)
    except KeyboardInterrupt:
      if traceback_wanted:
        raise
      line, code = INTERRUPTED, 128 + signal.SIGINT  # What a shell reports for Ctrl-C.
    except Exception as e:  # pylint: disable=broad-except
      line, code = (None if traceback_wanted else user_error(e)), 1
      if line is None:
        raise
      line = f"error: {line}"
    # Printed once the except block has dropped the traceback, and with it
    # the frames that still hold the failed run's datasets and iterators.
    print(f"audioclf: {line}", file=sys.stderr, flush=True)
    return code

  argv = list(sys.argv if argv is None else argv)
  try:
    argv = argv[:1] + flagfiles.expand(argv[1:])
  except ParamError as e:
    print(f"audioclf: error: {e}", file=sys.stderr, flush=True)
    sys.exit(1)
  exit_if_help(argv, doc)
  exit_without_final_collections()
  if tensorflow:
    quiet.start_tensorflow(argv)
  app.run(main_with_one_log_handler, argv=argv)
