"""Which Keras 3 weight gets which variable of a name-based checkpoint; the two-sided table where they do not fit.

Automatically, by kind and order: tf.compat.v1.layers name a layer's scope by
its kind and how many of that kind came before (`dense`, `dense_1`,
`conv2d`, `batch_normalization_1`), which Keras 3 layers of the same kinds
built in the same order take, weight by weight (`kernel`, `bias`, `gamma`,
`moving_mean` ...). Otherwise by a mapping, checkpoint variable (or a regular
expression matching whole names) -> "<Keras 3 layer>/<weight>", or null to
leave it uncarried:

  {"hidden/weights": "dense/kernel", "hidden/biases": "dense/bias",
   "logits/(weights|biases)": null}

A target may use the expression's groups (`"block_(\\d+)/w": "conv_\\1/kernel"`).
The variables it does not name pair automatically. Anything ambiguous, left
over on either side or of another shape is refused, before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional

from audioclf.migration.checkpoint import MigrationError
from audioclf.migration.names import NameCheckpoint

MAPPING_HELP = ('a .json mapping each checkpoint variable (or a regular expression of them) to '
                '"<Keras 3 layer>/<weight>", or to null to leave it')
_SCOPE = re.compile(r"(?P<kind>.+?)(?:_(?P<index>\d+))?")


class NameMismatch(MigrationError):
  """The model's weights do not line up with the checkpoint's variables; the message shows both."""


@dataclasses.dataclass
class NamePairs:
  """Each Keras 3 weight and the checkpoint variable it gets.

  Attributes:
    pairs: (Keras 3 variable, checkpoint variable name), in the model's weight order.
    left: checkpoint variables carried nowhere (a mapping's nulls).
  """
  pairs: list[tuple[Any, str]]
  left: list[str]

  @property
  def record(self) -> dict[str, Optional[str]]:
    """checkpoint variable -> "<layer>/<weight>" (None: not carried), for migration.json."""
    out: dict[str, Optional[str]] = {name: variable.path for variable, name in self.pairs}
    return {**out, **{name: None for name in self.left}}

  def not_carried(self) -> list[str]:
    return [f"checkpoint variable {name!r} (the mapping leaves it)" for name in self.left]


def read_name_mapping(path: str) -> dict[str, Optional[str]]:
  """A name-based --mapping file: {variable or regex: "layer/weight" or null}.

  Raises:
    MigrationError: not such a JSON object.
  """
  try:
    with open(path) as f:
      mapping = json.load(f)
  except (OSError, ValueError) as e:
    raise MigrationError(f"--mapping={path}: {e}") from e
  if not isinstance(mapping, dict) or not all(
      v is None or isinstance(v, str) and "/" in v for v in mapping.values()):
    raise MigrationError(f"--mapping={path}: give {MAPPING_HELP}")
  return mapping


def snake(class_name: str) -> str:
  """A layer class's kind as tf.compat.v1.layers and Keras name their scopes: Conv2D -> conv2d."""
  name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", class_name)
  return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def pair(model, legacy: NameCheckpoint, mapping: Optional[dict[str, Optional[str]]] = None,
         model_desc: str = "the model", hint: str = "") -> NamePairs:
  """Every weight of `model` paired with a checkpoint variable: by the mapping, then by kind and order.

  Raises:
    NameMismatch: a weight or variable left over, ambiguous, or of another
      shape, or a mapping that names what neither side has or names a thing
      twice: one line, then both sides (the pairs that held).
  """
  weights = {variable.path: variable for variable in model.weights}
  chosen, left, problem = _mapped(legacy, mapping or {}, weights)
  taken = set(chosen.values())
  free_layers = [layer for layer in model.layers if layer.weights
                 and not any(v.path in taken for v in layer.weights)]
  free_variables = [n for n in legacy.variables if n not in chosen and n not in left]
  chosen.update(_by_kind_and_order(free_layers, free_variables))
  by_weight = {path: name for name, path in chosen.items()}
  rows = [(v, by_weight.get(v.path)) for v in model.weights]
  unused = [n for n in legacy.variables if n not in by_weight.values() and n not in left]
  if problem is not None:
    path, reason = problem
    k = next((k for k, (v, _) in enumerate(rows) if v.path == path), None)
    raise NameMismatch(f"{legacy.path!r}: {reason}" + (f": {hint}" if hint else "") + "\n"
                       + table(rows, unused, legacy, mark=k))
  why = _first_misfit(rows, unused, legacy)
  if why is not None:
    k, reason = why
    raise NameMismatch(
        f"{legacy.path!r}: {model_desc} does not line up with the name-based checkpoint "
        f"({len(rows)} weights, the checkpoint {len(legacy.variables)} variables); first "
        f"mismatch at #{k}: {reason}" + (f": {hint}" if hint else "") + "\n"
        + table(rows, unused, legacy, mark=k))
  return NamePairs([(v, name) for v, name in rows], left)


def _mapped(legacy: NameCheckpoint, mapping: dict[str, Optional[str]], weights: dict
            ) -> tuple[dict[str, str], list[str], Optional[tuple[Optional[str], str]]]:
  """The mapping's pairs (checkpoint variable -> weight path), its nulls, and its first problem.

  A problem (a key that matches nothing, a target the model lacks, a variable
  given two places, a weight given two variables) is (the weight it concerns
  or None, why); what it concerns is left out of the pairs, so the table
  shows the rest.
  """
  chosen: dict[str, Optional[str]] = {}
  problems: list[tuple[Optional[str], str]] = []
  for key, target in mapping.items():
    matches = [n for n in legacy.variables if n == key or re.fullmatch(key, n)]
    if not matches:
      problems.append((None, f"--mapping names {key!r}, which matches no variable of the "
                             "checkpoint"))
    for name in matches:
      path = None if target is None else (
          target if name == key else re.fullmatch(key, name).expand(target))
      if path is not None and path not in weights:
        problems.append((None, f"--mapping gives {name!r} to {path!r}, which the model has "
                               "not"))
      elif name in chosen and chosen[name] != path:
        problems.append((chosen[name], f"--mapping gives {name!r} two places, "
                                       f"{chosen[name]!r} and {path!r}: ambiguous"))
      else:
        chosen[name] = path
  paths = [p for p in chosen.values() if p is not None]
  twice = next((p for p in paths if paths.count(p) > 1), None)
  if twice:
    problems.append((twice, f"--mapping gives {twice!r} two checkpoint variables: ambiguous"))
    chosen = {n: p for n, p in chosen.items() if p != twice}
  return ({n: p for n, p in chosen.items() if p is not None},
          [n for n, p in chosen.items() if p is None], problems[0] if problems else None)


def _by_kind_and_order(layers: list, names: list[str]) -> dict[str, str]:
  """tf.compat.v1.layers' scopes paired with Keras layers of the same kind in model order.

  A kind whose scopes and layers differ in number pairs nothing (the table shows it).
  """
  scopes: dict[str, list[tuple[int, str]]] = {}
  for name in names:
    scope = name.rpartition("/")[0]
    match = _SCOPE.fullmatch(scope.rpartition("/")[2]) if scope else None
    if match:
      entry = (int(match["index"] or 0), scope)
      if entry not in scopes.setdefault(match["kind"], []):
        scopes[match["kind"]].append(entry)
  chosen = {}
  for kind, found in scopes.items():
    of_kind = [layer for layer in layers if snake(type(layer).__name__) == kind]
    indices = [index for index, _ in found]
    if len(of_kind) != len(found) or len(set(indices)) != len(indices):
      continue  # Ambiguous: left unpaired, so the table shows it.
    for layer, (_, scope) in zip(of_kind, sorted(found)):
      for variable in layer.weights:
        name = f"{scope}/{variable.name}"
        if name in names:
          chosen[name] = variable.path
  return chosen


def _first_misfit(rows, unused: list[str], legacy: NameCheckpoint
                  ) -> Optional[tuple[int, str]]:
  """(row, why) of the first weight without a variable or of another shape, or of an unused variable."""
  for k, (variable, name) in enumerate(rows):
    if name is None:
      return k, f"weight {variable.path} {list(variable.shape)} gets no checkpoint variable"
    if list(variable.shape) != legacy.shape(name):
      return k, (f"{name} is {legacy.shape(name)} in the checkpoint but {variable.path} is "
                 f"{list(variable.shape)}")
  if unused:
    return len(rows), f"checkpoint variable {unused[0]} {legacy.shape(unused[0])} goes nowhere"
  return None


def table(rows, unused: list[str], legacy: NameCheckpoint, mark: Optional[int] = None) -> str:
  """Both sides: a line per Keras 3 weight and its variable, then the variables no weight takes."""
  lines = [("#", "Keras 3 weight", "checkpoint variable")]
  for k, (variable, name) in enumerate(rows):
    lines.append((str(k), f"{variable.path} {list(variable.shape)}",
                  f"{name} {legacy.shape(name)}" if name else "- (none)"))
  lines += [("", "-", f"{name} {legacy.shape(name)}") for name in unused]
  width = max(len(left) for _, left, _ in lines)
  return "\n".join(f"{'>' if k == mark else ' '} {index:>2} {left:<{width}}  {right}"
                   for k, (index, left, right) in enumerate(lines, start=-1))
