"""audioclf: audio classifiers whose input pipeline is never the bottleneck."""

from audioclf.params import Params
from audioclf.pipeline import input_fn

__version__ = "0.1.0"

# Heavier entry points load on first use, so `import audioclf` stays light for
# notebooks and the flags module, and optional parts fail only when used.
_LAZY = {
    "build_model": ("audioclf.models", "build_model"),
    "train": ("audioclf.train", "train"),
    "evaluate": ("audioclf.evaluate", "evaluate"),
    "export": ("audioclf.export", "export"),
    "tune": ("audioclf.tune", "tune"),
}


def __getattr__(name):
  if name in _LAZY:
    import importlib
    module, attr = _LAZY[name]
    return getattr(importlib.import_module(module), attr)
  raise AttributeError(f"module 'audioclf' has no attribute {name!r}")


__all__ = ["Params", "input_fn", *_LAZY]
