"""audioclf's commands: `python -m audioclf <command>`, the `audioclf-<command>` scripts, or `python -m audioclf.commands.<command>`.

Each command is a module here: it defines its flags (all of them live in
`flags.py`), a `main(argv)` that hands the work to a library function a user
can call from Python with the same effect, and `run(argv=None)`.
"""

from __future__ import annotations

import importlib
import sys
from typing import Optional, Sequence

# Name -> what it does, in the order `python -m audioclf` lists them.
COMMANDS = {
    "train": "train a model into --model_dir, resuming what is there",
    "evaluate": "a model_dir or SavedModel on one split, with the evaluation report",
    "predict": "labels for audio files; segments of long recordings",
    "export": "a SavedModel, or TensorFlow Lite models checked against the model",
    "listen": "keyword spotting on a file or a live stream, hop by hop",
    "tune": "hyperparameter search with keras-tuner",
    "cache": "fill, inspect, verify or prune the clip cache",
    "migrate": "a legacy (Keras 2) model_dir as a Keras 3 one",
    "launch": "a training cluster on this host (one process per task)",
    "service": "a tf.data service dispatcher or worker",
    "synthesize": "keywords from text: a spoken-word dataset, spoken by espeak-ng",
}


def usage() -> str:
  width = max(len(name) for name in COMMANDS)
  lines = ["usage: python -m audioclf <command> [--flags] (or audioclf-<command>)",
           "       python -m audioclf <command> --help   lists a command's flags", "", "commands:"]
  lines += [f"  {name:<{width}}  {what}" for name, what in COMMANDS.items()]
  return "\n".join(lines)


def dispatch(argv: Optional[Sequence[str]] = None) -> None:
  """`python -m audioclf <command> [args]`: runs that command with the rest of the arguments."""
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(usage())
    raise SystemExit(0 if len(argv) >= 2 else 2)
  name = argv[1]
  if name not in COMMANDS:
    print(f"audioclf: error: no command {name!r}\n\n{usage()}", file=sys.stderr)
    raise SystemExit(2)
  importlib.import_module(f"audioclf.commands.{name}").run([f"audioclf {name}", *argv[2:]])
