"""Which stack this is: Keras 2 or 3, the TensorFlow version, whether tf.estimator exists."""

from __future__ import annotations

import importlib.util
from typing import Any

import keras
import tensorflow as tf

from audioclf.params import ParamError

KERAS3: bool = int(keras.__version__.split(".")[0]) >= 3
TF_VERSION: tuple[int, int] = tuple(int(part) for part in tf.__version__.split(".")[:2])
# tf.estimator lives in the tensorflow-estimator package, which stops at TF 2.15;
# model_to_estimator needs Keras 2 as well.
ESTIMATOR: bool = not KERAS3 and importlib.util.find_spec("tensorflow_estimator") is not None

LEGACY_STACK = "legacy"
CURRENT_STACK = "current"
STACK: str = CURRENT_STACK if KERAS3 else LEGACY_STACK
# What a user runs to get the stack they lack; tools/_venv.sh makes both venvs.
HOW_TO_GET = {
    LEGACY_STACK: "the legacy stack (Python 3.11, TensorFlow 2.15, Keras 2): "
                  "AUDIOCLF_STACK=legacy tools/demo.sh creates it in .venv-legacy; "
                  "then run .venv-legacy/bin/python -m audioclf...",
    CURRENT_STACK: "the current stack (Python 3.12 or 3.13, TensorFlow >= 2.20, Keras 3): "
                   "AUDIOCLF_STACK=current tools/demo.sh creates it in .venv; "
                   "then run .venv/bin/python -m audioclf...",
}


class StackError(ParamError):
  """A parameter value that needs the other stack; commands end on it in one line."""


def stack_record() -> dict[str, Any]:
  """This stack as params.json records it: TensorFlow major.minor and the Keras major version."""
  return {"name": STACK, "tensorflow": f"{TF_VERSION[0]}.{TF_VERSION[1]}",
          "keras": int(keras.__version__.split(".")[0])}


def require_estimator() -> None:
  """Raises StackError unless tf.estimator (and model_to_estimator) can run here."""
  if not ESTIMATOR:
    raise StackError(
        f"--engine=estimator needs tf.estimator, which TensorFlow {tf.__version__} with Keras "
        f"{keras.__version__} does not have: it needs {HOW_TO_GET[LEGACY_STACK]}. Here, "
        "--engine=keras trains the same model.")
