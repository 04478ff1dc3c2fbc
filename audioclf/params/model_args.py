"""ModelArgs: a model's or an optimizer's own hyperparameters, read from a flag and spelt as one."""

from __future__ import annotations

import ast
import json
from typing import Any, Mapping, Union


class ModelArgs(dict):
  """A model's own hyperparameters (--model_args), or an optimizer's: a frozen, hashable dict.

  Given as a dict, JSON (`{"blocks": 3}`) or name=value pairs
  (`blocks=3,width=48`), each value read as JSON where it is JSON (3, 0.5,
  true, "relu", [1, 2]) and as a string otherwise. Lists become tuples, so
  the whole stays hashable. Which names a model takes, and of what types, its
  own signature says: audioclf.model.registry checks them.
  """

  def __init__(self, value: Union[str, Mapping[str, Any], Any] = ()):
    if isinstance(value, str):
      value = parse_model_args(value)
    super().__init__({str(k): _frozen(v) for k, v in dict(value).items()})

  def __hash__(self):
    return hash(tuple(sorted(self.items())))

  def _frozen_error(self, *args, **kwargs):
    raise TypeError("ModelArgs are frozen: make new ones (params.replace(model_args=...))")

  __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _frozen_error

  def __repr__(self):
    return f"ModelArgs({dict(self)!r})"

  def flag(self) -> str:
    """As --model_args spells them: name=value pairs, or JSON where a value would not read back."""
    pairs = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in self.items()]
    if all("," not in p and p.count("=") == 1 and _parse_value(p.split("=", 1)[1]) == v
           for p, v in zip(pairs, self.values())):
      return ",".join(pairs)
    return json.dumps(dict(self), sort_keys=True)


def _frozen(value: Any) -> Any:
  return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _parse_value(text: str) -> Any:
  try:
    return _frozen(json.loads(text))
  except ValueError:
    try:  # Python's spelling too: True, False, None, (1, 2).
      return _frozen(ast.literal_eval(text))
    except (ValueError, SyntaxError):
      return text


def parse_model_args(text: str) -> Any:
  """--model_args' text as a dict; the text itself where it is neither JSON nor name=value pairs."""
  text = text.strip()
  if not text:
    return {}
  if text.startswith("{"):
    try:
      value = json.loads(text)
    except ValueError:
      return text
    return value if isinstance(value, dict) else text
  pairs = [part.split("=", 1) for part in text.split(",") if part.strip()]
  if any(len(pair) != 2 or not pair[0].strip().isidentifier() for pair in pairs):
    return text
  return {k.strip(): _parse_value(v.strip()) for k, v in pairs}


def flag_value(value: Any) -> str:
  """`value` as a flag spells it: lists comma-separated."""
  if isinstance(value, ModelArgs):
    return value.flag()
  if isinstance(value, tuple):
    return ",".join(str(v) for v in value)
  return str(value)
