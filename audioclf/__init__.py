"""audioclf: audio classifiers whose input pipeline is never the bottleneck."""

import types

from audioclf.params import Params

__version__ = "0.1.0"

# Entry points load on first use: `import audioclf` stays light, and
# `python -m audioclf.<module>` does not find its module half-imported.
_LAZY = {
    "input_fn": ("audioclf.data.pipeline", "input_fn"),
    "manifest": ("audioclf.manifest", None),
    "build_model": ("audioclf.models", "build_model"),
    "train": ("audioclf.train", "train"),
    "evaluate": ("audioclf.evaluate", "evaluate"),
    "export": ("audioclf.export", "export"),
    "tune": ("audioclf.tune", "tune"),
    "migrate": ("audioclf.migrate", "migrate"),
}


class CommandModule(types.ModuleType):
  """A command module that is also its command: `audioclf.train(params)` calls `train.train`.

  `audioclf.train` names both the module `audioclf/train.py` and its function.
  The lazy attribute below binds the function; but an `import audioclf.train`
  (or `from audioclf.train import train`) done first makes the import system
  bind the module there instead. Each command module sets its class to this
  one, so the name works as a function either way.
  """

  def __call__(self, *args, **kwargs):
    return getattr(self, self.__name__.rsplit(".", 1)[-1])(*args, **kwargs)


def __getattr__(name):
  if name in _LAZY:
    import importlib
    module, attr = _LAZY[name]
    module = importlib.import_module(module)
    # Importing audioclf.train binds the module to the name `train`; bind the
    # function instead, so audioclf.train(params) works on every call.
    value = globals()[name] = getattr(module, attr) if attr else module
    return value
  raise AttributeError(f"module 'audioclf' has no attribute {name!r}")


__all__ = ["Params", *_LAZY]
