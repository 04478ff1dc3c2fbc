"""migrate_named(): an Estimator with no Keras model (a model_fn's or canned one's name-based checkpoint) to Keras 3.

  python -m audioclf migrate --from_model_dir=<their estimator dir> \\
      --model=team_rewrites:layers_cnn --estimator=team_estimators:layers_cnn \\
      --to_model_dir=runs/layers_cnn-keras3 [--mapping=map.json] [--report ...]
  python -m audioclf migrate --from_model_dir=<a canned Estimator's dir> \\
      --estimator=team_estimators:dnn_frames --to_model_dir=runs/dnn-keras3 [--report ...]

A model_fn's model is the team's Keras 3 rewrite (`--model`, a builder as
for model_to_estimator's Estimators); a canned classifier's is built by
canned.py from the Estimator's own constructor arguments, which
`--estimator=module:function` (the team's function returning it) gives on the
legacy stack (or a .json legacy_estimator --describe wrote there). Each
checkpoint variable goes to one Keras 3 weight (name_mapping.py), the step
and the slots into the model's optimizer (named_optimizer.py), and what
comes out is foreign.py's: model.keras, which plain Keras loads, and
migration.json. `--estimator` is also what --report runs on the legacy stack
for the Estimator's own probabilities.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from typing import Any, Optional, Union

from audioclf.compat import keras
from audioclf.migration import canned, name_mapping, parity, team as team_lib
from audioclf.migration.checkpoint import MigrationError, find_checkpoint
from audioclf.migration.named_optimizer import carry_named_optimizer, keras3_changes
from audioclf.migration.names import NameCheckpoint
from audioclf.params import ModelArgs

BATCH_NORM_NOTE = (
    "BatchNormalization's moving variance: TF1's fused batch norm averaged in the unbiased "
    "batch variance, Keras 3 averages the biased one (less apart as batches grow)")


def migrate_named(from_model_dir: str, to_model_dir: str, model: Optional[str] = None,
                  model_args: Union[ModelArgs, dict, str] = ModelArgs(),
                  estimator: Union[None, str, dict] = None,
                  mapping: Union[None, str, dict[str, Optional[str]]] = None,
                  carry_optimizer_state: bool = True,
                  legacy_python: Optional[str] = None) -> dict[str, Any]:
  """Writes to_model_dir: the name-based Estimator of from_model_dir as a Keras 3 model.

  Args:
    from_model_dir: the Estimator's model_dir.
    to_model_dir: a folder that does not exist yet, or is empty.
    model: the team's Keras 3 rewrite, `module:function`; None for a canned
      classifier, built from `estimator`'s constructor arguments.
    model_args: the builder's keyword arguments.
    estimator: the team's function returning its Estimator (`module:function`,
      run on the legacy stack), or a canned one's constructor arguments (a
      dict, or the .json legacy_estimator --describe wrote).
    mapping: checkpoint variable (or regex) -> "<layer>/<weight>" or None, or
      the path of such a .json; the rest pair by kind and order.
    carry_optimizer_state: False leaves the slots fresh (at the carried step).
    legacy_python: the legacy stack's Python, to read a canned Estimator's
      arguments (default parity.legacy_python()).

  Returns:
    The record, also in to_model_dir/migration.json (foreign.py's fields;
    `variables`: checkpoint variable -> Keras 3 weight; `estimator`,
    `constructor` for a canned classifier).

  Raises:
    MigrationError: see foreign.migrate_estimator; a mismatch (NameMismatch,
      both sides in the message), nothing naming the model.
  """
  team_lib.check_folders(from_model_dir, to_model_dir)
  legacy = NameCheckpoint.read(find_checkpoint(from_model_dir))
  mapping = name_mapping.read_name_mapping(mapping) if isinstance(mapping, str) else mapping
  built = _build(model, model_args, estimator, legacy, legacy_python)
  record = {
      "from_model_dir": os.path.abspath(from_model_dir),
      "checkpoint": os.path.basename(legacy.path),
      "steps": legacy.step,
      "builder": model,
      # The function --report runs on the legacy stack; none where only its arguments were given.
      "estimator": estimator if isinstance(estimator, str) and ":" in estimator
                   and not estimator.endswith(".json") else None,
      "constructor": built.constructor,
      "model_args": dict(built.args),
      **_carry(built, legacy, mapping, carry_optimizer_state),
      "keras_file": os.path.join(to_model_dir, team_lib.KERAS_FILE),
      "model_dir": None,
  }
  team_lib.write(to_model_dir, built.team, record, None, legacy.step)
  return {**record, "to_model_dir": to_model_dir}


@dataclasses.dataclass
class _Built:
  """The Keras 3 model a name-based checkpoint goes into, and what its building says."""
  team: Any  # The keras.Model.
  args: ModelArgs  # The builder's arguments; none for a canned classifier.
  auto: dict[str, Optional[str]]  # Pairs the model knows itself (a canned classifier's).
  desc: str  # The model, in words, for messages.
  constructor: Optional[dict[str, Any]] = None  # A canned classifier's constructor arguments.
  differences: list[str] = dataclasses.field(default_factory=list)


def _build(model: Optional[str], model_args: Union[ModelArgs, dict, str],
           estimator: Union[None, str, dict], legacy: NameCheckpoint,
           legacy_python: Optional[str]) -> _Built:
  """The team's rewrite (`model`), or the canned classifier `estimator` describes, built afresh.

  Built after keras.backend.clear_session(), so that its layers have the
  names a fresh process gives them (dense, dense_1), which --mapping and the
  table use, whatever this one built before.
  """
  keras.backend.clear_session()
  if model:
    builder = team_lib.whole_model_builder(model)
    args = builder.arguments(ModelArgs(model_args))
    team = builder.function(**args)
    if not isinstance(team, keras.Model):
      raise MigrationError(f"--model={model}: {builder.target} returned "
                           f"{type(team).__name__}, not a keras.Model")
    return _Built(team, args, {}, f"{model}'s model")
  if estimator:
    constructor = _constructor(estimator, legacy_python)
    team, auto, differences = canned.build(constructor, legacy)
    return _Built(team, ModelArgs(), auto, f"the Keras 3 {constructor['estimator']}",
                  constructor, differences)
  raise MigrationError(f"{legacy.path!r} is a name-based checkpoint (a model_fn's or a canned "
                       "Estimator's): give --model=<module:builder of its Keras 3 rewrite>, or "
                       "--estimator=<module:function returning a canned classifier>")


def _carry(built: _Built, legacy: NameCheckpoint, mapping: Optional[dict[str, Optional[str]]],
           carry_optimizer_state: bool) -> dict[str, Any]:
  """The checkpoint's variables, step and slots carried into the model: their part of the record."""
  team = built.team
  pairs = name_mapping.pair(team, legacy, {**built.auto, **(mapping or {})}, built.desc,
                            hint=f"give --mapping=<{name_mapping.MAPPING_HELP}>")
  for variable, name in pairs.pairs:
    variable.assign(legacy.variables[name])
  changes, why = _change_optimizer(team, legacy)
  state, missing, more = carry_named_optimizer(team, legacy, pairs.pairs, carry_optimizer_state)
  differences = built.differences + why + more
  if any(isinstance(layer, keras.layers.BatchNormalization) for layer in team.layers):
    differences.append(BATCH_NORM_NOTE)
  return {
      "input": canned.input_record(team),
      "inputs": [{"name": i.name, "shape": list(i.shape[1:])} for i in team.inputs],
      "classes": int(team.outputs[0].shape[-1]),
      "weights": len(pairs.pairs),
      "variables": pairs.record,
      "optimizer": type(team.optimizer).__name__ if getattr(team, "optimizer", None) else None,
      "legacy_optimizer": legacy.optimizer,
      "optimizer_changes": changes,
      "optimizer_state": state,
      "not_carried": pairs.not_carried() + missing,
      "differences": differences,
  }


def _change_optimizer(team, legacy: NameCheckpoint) -> tuple[dict[str, Any], list[str]]:
  """Recompiles `team` where Keras 3's optimizer needs other arguments to take the legacy steps.

  Returns:
    (the changed arguments, why, in words).
  """
  optimizer = getattr(team, "optimizer", None)
  if optimizer is None:
    return {}, []
  changes, why = keras3_changes(optimizer, legacy)
  if changes:
    changed = type(optimizer).from_config({**optimizer.get_config(), **changes})
    team.compile_from_config({**team.get_compile_config(),
                              "optimizer": keras.optimizers.serialize(changed)})
  return changes, why


def _constructor(estimator: Union[str, dict], python: Optional[str]) -> dict[str, Any]:
  """A canned Estimator's constructor arguments: given, from a .json, or read on the legacy stack.

  Raises:
    MigrationError: no legacy Python, or its run failed (its last line in the message).
  """
  if isinstance(estimator, dict):
    return estimator
  if estimator.endswith(".json"):
    with open(estimator) as f:
      return json.load(f)
  python = parity.the_legacy_python(
      python, f"--estimator={estimator}: a canned Estimator's constructor arguments come from",
      f"--estimator=<the .json `python -m audioclf.migration.legacy_estimator "
      f"--estimator={estimator} --describe=` wrote there>")
  with tempfile.TemporaryDirectory(prefix="audioclf-describe-") as tmp:
    out = os.path.join(tmp, "constructor.json")
    cmd = [python, "-m", "audioclf.migration.legacy_estimator", f"--estimator={estimator}",
           f"--describe={out}"]
    proc = subprocess.run(cmd, env=parity.legacy_env(), capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0 or not os.path.isfile(out):
      last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
      raise MigrationError(f"--estimator={estimator}: reading its arguments on the legacy stack "
                           f"failed ({python}, exit {proc.returncode}): {last}")
    with open(out) as f:
      return json.load(f)
