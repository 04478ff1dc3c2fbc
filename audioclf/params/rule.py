"""Rule: what a Params field accepts besides its type, and how a value is read as that type."""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
from typing import Any, Optional

from audioclf.params.model_args import ModelArgs


@dataclasses.dataclass(frozen=True)
class Rule:
  """What a field accepts besides its type: bounds (inclusive ge/le, exclusive gt/lt) or choices."""

  ge: Optional[float] = None
  gt: Optional[float] = None
  le: Optional[float] = None
  lt: Optional[float] = None
  choices: tuple[str, ...] = ()
  size: Optional[int] = None  # A list field: how many values it holds.
  why: str = ""  # Said after the range, where the limit is not obvious.

  def describe(self) -> str:
    """The allowed values in words, e.g. "> 0 and <= 600" or "one of fail, skip"."""
    if self.choices:
      return "one of " + ", ".join(self.choices)
    parts = [f"{op} {bound}" for op, bound in ((">=", self.ge), (">", self.gt), ("<=", self.le),
                                                 ("<", self.lt)) if bound is not None]
    return " and ".join(parts)

  def problem(self, value: Any, kind: tuple[type, bool], item: Optional[type] = None,
              ) -> Optional[str]:
    """Why `value` is not allowed ("must be ..."), or None where it is.

    A list field (`kind` (tuple, ...)) has each of its values checked as one
    of type `item`.
    """
    base, optional = kind
    if value is None:
      return None if optional else f"must be set ({_TYPE_NAMES[base]})"
    if base is tuple:
      if not isinstance(value, tuple):
        return f"must be a comma-separated list, not {type(value).__name__}"
      if self.size is not None and len(value) != self.size:
        return f"must be {self.size} values" + (f" ({self.why})" if self.why else "")
      return next((p for p in (self.problem(v, (item, False)) for v in value) if p), None)
    if not _is_a(value, base):
      return f"must be {_TYPE_NAMES[base]}, not {type(value).__name__}"
    if self.choices and value not in self.choices:
      return f"must be {self.describe()}"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
      if not math.isfinite(value):
        return "must be a finite number"
      if not all(bound is None or holds(value, bound) for bound, holds in (
          (self.ge, operator.ge), (self.gt, operator.gt), (self.le, operator.le),
          (self.lt, operator.lt))):
        return f"must be {self.describe()}" + (f" ({self.why})" if self.why else "")
    return None


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               tuple: "a comma-separated list",
               ModelArgs: "name=value pairs (a=1,b=2) or a JSON object"}


def _is_a(value: Any, base: type) -> bool:
  if base is bool:
    return isinstance(value, bool)
  if base is int:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
  if base is float:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
  return isinstance(value, base)


def as_tuple(value: Any, item: type, is_range: bool) -> Any:
  """`value` as a tuple of `item`s where it reads as one; else as it was, for validate to refuse."""
  if isinstance(value, str):
    value = [v.strip() for v in value.split(",") if v.strip()]
  elif isinstance(value, numbers.Real) and not isinstance(value, bool):
    value = [value]
  if not isinstance(value, (list, tuple)):
    return value
  if item is float:
    def number(v):
      try:
        return float(v) if isinstance(v, (str, numbers.Real)) and not isinstance(v, bool) else v
      except ValueError:
        return v
    value = [number(v) for v in value]
  if is_range and len(value) == 1:
    value = value * 2
  return tuple(value)


def range_fields(params_class: type) -> frozenset[str]:
  """The min,max fields of a Params class (their rule's size is 2): a single value v means v,v."""
  return frozenset(f.name for f in dataclasses.fields(params_class)
                   if f.metadata["rule"].size == 2)
