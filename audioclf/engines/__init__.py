"""The training engines, by name: each trains `models.build_model`'s model its own way.

An engine module has `train(params, manifest) -> engines.common.Result`; it
leaves object-based checkpoints in params.model_dir that `model_dir.load_model`
restores, whichever engine wrote them.
"""

from __future__ import annotations

import importlib
from typing import Callable

from audioclf.engines.common import Result
from audioclf.manifest import Manifest
from audioclf.params import Params

# Modules, imported on first use: the Keras engine need not load tf.estimator.
ENGINES = {
    "keras": "audioclf.engines.keras_fit",
    "estimator": "audioclf.engines.estimator",
}


def get(name: str) -> Callable[[Params, Manifest], Result]:
  """The `train` function of engine `name`.

  Raises:
    ValueError: an unknown engine.
  """
  if name not in ENGINES:
    raise ValueError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}")
  return importlib.import_module(ENGINES[name]).train
