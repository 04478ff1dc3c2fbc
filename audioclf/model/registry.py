"""Finding a model by name: `--model=module:function` or a registered short name, and its own arguments.

A model is a Python function, found one of two ways, the built-in ones
exactly as a user's:

  --model=my_pkg.models:tiny     the function `tiny` of module my_pkg.models, found on
                                 PYTHONPATH (sys.path)
  --model=bc_resnet              a short name, registered as an entry point of the group
                                 "audioclf.models" by an installed package; audioclf's own
                                 pyproject.toml registers cnn, ds_cnn, bc_resnet, matchboxnet

What the function is, its first parameter says:

  def tiny(spectrogram, params, *, blocks: int = 2, width: int = 16) -> pooled features
      a body on audioclf's log-mel front end: log-mel [batch, frames, n_mels, 1] in,
      pooled features [batch, dims] out; audioclf adds the front end (log-mel,
      SpecAugment, per-clip normalization) and the head (dropout, softmax)
  def raw(waveform, params, *, filters: int = 32) -> pooled features
      a body that brings its own front end (MFCC, a raw waveform conv): float32
      waveforms [batch, clip_samples] in; audioclf adds the head
  def builder(*, classes: int = 4, ...) -> keras.Model
      a whole model (a team's own, as audioclf.migration carries): one input of
      raw audio [clip_samples], probabilities out; audioclf adds nothing

Its keyword-only arguments, with their defaults and type annotations, are the
model's own hyperparameters: `--model_args=blocks=3,width=48` sets them,
checked here against the signature before any work. A module may also define
`search_space(hp)`, returning those arguments drawn from keras-tuner's `hp`:
the tuner searches it beside audioclf's own hyperparameters.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import inspect
import sys
from typing import Any, Callable, Optional

from audioclf.params import ModelArgs, ParamError, Params

ENTRY_POINT_GROUP = "audioclf.models"
BODY_INPUTS = ("spectrogram", "waveform")  # A body's first parameter: what it takes.
WHOLE = "model"  # The kind of a function that builds a whole keras.Model.


@dataclasses.dataclass(frozen=True)
class Model:
  """A model as resolved from `--model`: what to call, what it takes, and its own arguments.

  Attributes:
    name: as given (`cnn`, `my_pkg.models:tiny`).
    target: `module:function`, what the name resolved to.
    function: the function itself.
    kind: "spectrogram" or "waveform" (a body: what its first parameter takes),
      or "model" (it builds a whole keras.Model).
    defaults: each keyword argument's default, in signature order.
    types: each keyword argument's type, from its annotation (else its default's).
    search_space: the module's `search_space(hp)`, or None.
  """
  name: str
  target: str
  function: Callable[..., Any]
  kind: str
  defaults: dict[str, Any]
  types: dict[str, type]
  search_space: Optional[Callable[[Any], dict[str, Any]]]

  def arguments(self, given: ModelArgs) -> ModelArgs:
    """`given` checked against the signature, with the defaults of the rest.

    Raises:
      ParamError: a name the function does not take, or a value of another type.
    """
    unknown = sorted(set(given) - set(self.defaults))
    if unknown:
      takes = ", ".join(f"{k}: {self.types[k].__name__} = {v!r}"
                        for k, v in self.defaults.items()) or "no arguments"
      raise ParamError(f"--model_args={given.flag()}: {self.name} takes no argument "
                       f"{unknown[0]!r}; it takes {takes}")
    values = dict(self.defaults)
    for key, value in given.items():
      values[key] = _as_type(value, self.types[key], f"--model_args={given.flag()}: {key}")
    return ModelArgs(values)


def names() -> dict[str, str]:
  """The registered short names and what each resolves to (module:function)."""
  return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def resolve(name: str) -> Model:
  """The model `--model=name` names.

  Raises:
    ParamError: no such registered name, a module that cannot be imported (the
      message names it and where it was looked for), no such function, or a
      function that is not a model.
  """
  if ":" in name:
    target = name
  else:
    registered = names()
    if name not in registered:
      raise ParamError(
          f"--model={name}: no model is registered under that name (registered: "
          f"{', '.join(sorted(registered)) or 'none; is audioclf installed?'}); or give "
          "module:function, the module on PYTHONPATH")
    target = registered[name]
  module_name, _, attr = target.partition(":")
  module = _import(module_name, name)
  function = getattr(module, attr, None)
  if not callable(function):
    raise ParamError(f"--model={name}: module {module_name} ({module.__file__}) has no "
                     f"function {attr!r}")
  kind, defaults, types = _signature(function, name)
  space = getattr(module, "search_space", None)
  return Model(name=name, target=target, function=function, kind=kind, defaults=defaults,
               types=types, search_space=space if callable(space) else None)


def check(params: Params) -> Model:
  """Resolves params.model and checks params.model_args against it: before any work.

  Raises:
    ParamError: see `resolve` and `Model.arguments`.
  """
  model = resolve(params.model)
  model.arguments(params.model_args)
  return model


def _import(module_name: str, name: str):
  try:
    return importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    if e.name and module_name.startswith(e.name):  # The module itself, not one it imports.
      # Where it was looked for, less Python's own library.
      own = [p or "." for p in sys.path if not p.startswith((sys.base_prefix, sys.prefix))]
      raise ParamError(f"--model={name}: no module {module_name!r} in {', '.join(own) or '.'} "
                       "or the installed packages; add its folder to PYTHONPATH") from e
    raise ParamError(f"--model={name}: importing {module_name} failed: {e}") from e


def _signature(function: Callable[..., Any], name: str) -> tuple[str, dict, dict]:
  """(kind, defaults, types) of a model function, from its signature."""
  parameters = list(inspect.signature(function).parameters.values())
  positional = [p for p in parameters
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
  if positional and positional[0].name in BODY_INPUTS and len(positional) == 2:
    kind = positional[0].name
  elif not positional:
    kind = WHOLE
  else:
    raise ParamError(
        f"--model={name}: {function.__qualname__}{inspect.signature(function)} is not a model: "
        "a body takes (spectrogram, params, *, args...) or (waveform, params, *, args...); a "
        "whole-model builder takes keyword arguments only")
  keywords = [p for p in parameters if p.default is not p.empty]
  hints = _hints(function)
  defaults = {p.name: p.default for p in keywords}
  types = {p.name: hints.get(p.name) or type(p.default) for p in keywords}
  return kind, defaults, types


def _hints(function: Callable[..., Any]) -> dict[str, type]:
  """The annotations that are plain types (int, float, bool, str, tuple), resolved."""
  try:
    hints = inspect.get_annotations(function, eval_str=True)
  except Exception:  # pylint: disable=broad-except
    return {}  # An annotation that does not evaluate: fall back to the defaults' types.
  return {k: v for k, v in hints.items() if isinstance(v, type)}


def _as_type(value: Any, kind: type, where: str) -> Any:
  """`value` as `kind` where that loses nothing (3 -> 3.0 for a float); else ParamError."""
  if kind is float and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  if kind is tuple and isinstance(value, tuple):
    return value
  if kind is type(None) or isinstance(value, kind) and not (
      kind is int and isinstance(value, bool)):
    return value
  raise ParamError(f"{where} must be {kind.__name__}, not {type(value).__name__} ({value!r})")
