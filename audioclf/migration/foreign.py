"""migrate_estimator(): an Estimator a team's own code built with model_to_estimator, carried to Keras 3.

  python -m audioclf migrate --from_model_dir=<their estimator dir> \\
      --model=team_models:raw_conv --to_model_dir=runs/raw_conv-keras3 \\
      [--model_args=...] [--mapping=map.json] \\
      [--data_dir=data --sample_rate=16000 --clip_seconds=0.25]   # also a model_dir

audioclf never built this model: the team's builder (`--model`, a function
of keyword arguments that returns its compiled keras.Model, the one they gave
model_to_estimator) builds it again on Keras 3, and the checkpoint's values go
into it (alignment.py pairs the layers, by order or by a mapping file). The
step and the optimizer's slots go into the builder's own optimizer, whose
hyperparameters stay the builder's (differences from the checkpoint's are
named). What comes out, in to_model_dir:

  model.keras      the team's model, compiled with the carried optimizer state:
                   keras.saving.load_model() loads it with plain Keras
  migration.json   the record: what was carried, what was not, what differs
  labels.txt, params.json, model.ckpt-<step>.*, train.flags
                   with --data_dir (or --manifest) and a model of one raw-audio
                   input of clip_samples: a model_dir audioclf trains on
                   (`python -m audioclf train --flagfile=<to>/train.flags
                   --train_steps=...` resumes at the carried step)
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from audioclf import compat
from audioclf.compat import keras
from audioclf.data import manifest as manifest_lib
from audioclf.migration.alignment import MAPPING_HELP, read_mapping
from audioclf.migration import named, names
from audioclf.migration.checkpoint import LegacyCheckpoint, MigrationError, find_checkpoint
from audioclf.migration.optimizer import (
  carry_builders_optimizer,
  hyperparameter_differences,
  keras3_arguments,
)
# RECORD_FILE too: callers name the files from here.
from audioclf.migration.team import (  # pylint: disable=unused-import
  KERAS_FILE,
  RECORD_FILE,
  check_folders,
  whole_model_builder,
  write,
)
from audioclf.migration.weights import assign_weights
from audioclf.model import build as models
from audioclf.model import registry
from audioclf.params import BUILDERS_OPTIMIZER, ModelArgs, ParamError, Params

BATCH_NORM_NOTE = (
    "BatchNormalization's moving variance: the Estimator's fused kernel averaged in the "
    "unbiased batch variance, Keras 3 averages the biased one (2.7e-6 apart after one step on "
    "tests/fixtures/foreign/spectrogram_cnn; less as batches grow)")


def migrate_estimator(from_model_dir: str, to_model_dir: str, model: str,
                      model_args: Union[ModelArgs, dict, str] = ModelArgs(),
                      mapping: Union[None, str, dict[str, Optional[int]]] = None,
                      carry_optimizer_state: bool = True,
                      params: Optional[Params] = None,
                      estimator: Optional[str] = None,
                      legacy_python: Optional[str] = None) -> dict[str, Any]:
  """Writes to_model_dir: the Estimator in from_model_dir, as the team's builder builds it on Keras 3.

  Args:
    from_model_dir: the Estimator's model_dir (its `checkpoint` file and the
      checkpoint it names; moved folders are fine).
    to_model_dir: a folder that does not exist yet, or is empty.
    model: the builder, `module:function` (module on PYTHONPATH) or a
      registered name.
    model_args: the builder's keyword arguments.
    mapping: Keras 3 layer name -> legacy layer index or None (alignment.py),
      or the path of such a .json; None pairs the layers by order.
    carry_optimizer_state: False leaves the slots fresh (at the carried step).
    params: with a data source (data_dir or manifest), sample_rate and
      clip_seconds: also write a model_dir audioclf trains on, its labels from
      the data; its other fields (batch_size...) go into its params.json.
    estimator: the team's function returning its Estimator (module:function);
      for a name-based checkpoint (a model_fn's or a canned Estimator's),
      which named.migrate_named carries instead.
    legacy_python: the legacy stack's Python (named.migrate_named's).

  Returns:
    The record, also in to_model_dir/migration.json: from_model_dir,
    checkpoint, steps, builder, model_args, input, classes, weights (values
    carried), layers ([Keras 3 layer, legacy layer] pairs), optimizer,
    optimizer_state ("carried", "partial", "fresh"), not_carried and
    differences (sentences), keras_file, model_dir (None without data),
    to_model_dir.

  Raises:
    MigrationError: not on the current stack; no checkpoint, or one of no
      Keras model; a builder that is not a whole model; layers that do not
      line up (the message shows both sides); to_model_dir not empty.
    ParamError: with params, a model that does not take a clip of raw audio or
      give one probability per label.
  """
  check_folders(from_model_dir, to_model_dir)
  if names.is_name_based(find_checkpoint(from_model_dir)):
    return named.migrate_named(from_model_dir, to_model_dir, model, model_args, estimator,
                               mapping, carry_optimizer_state, legacy_python)
  return _migrate_keras_estimator(from_model_dir, to_model_dir, model, model_args, mapping,
                                  carry_optimizer_state, params)


def _migrate_keras_estimator(from_model_dir: str, to_model_dir: str, model: str,
                             model_args: Union[ModelArgs, dict, str],
                             mapping: Union[None, str, dict[str, Optional[int]]],
                             carry_optimizer_state: bool,
                             params: Optional[Params]) -> dict[str, Any]:
  """migrate_estimator of an object-based checkpoint: a model_to_estimator Estimator's."""
  legacy = LegacyCheckpoint.read(find_checkpoint(from_model_dir))
  builder = whole_model_builder(model)
  args = builder.arguments(ModelArgs(model_args))
  team, optimizer_changes, changes = _build(builder, args, legacy)
  record = {
      "from_model_dir": os.path.abspath(from_model_dir),
      "checkpoint": os.path.basename(legacy.path),
      "steps": legacy.step,
      "builder": builder.target,
      "model_args": dict(args),
      **_carry(team, legacy, model, mapping, carry_optimizer_state, optimizer_changes, changes),
      "keras_file": os.path.join(to_model_dir, KERAS_FILE),
      "model_dir": None,
  }
  audio = None
  if params is not None and (params.data_dir or params.manifest):
    audio = _audio_model_dir(team, _audio_params(params, model, args, optimizer_changes,
                                                 to_model_dir))
    record["model_dir"] = to_model_dir
  write(to_model_dir, team, record, audio, legacy.step)
  return {**record, "to_model_dir": to_model_dir}


def _carry(team, legacy: LegacyCheckpoint, model: str,
           mapping: Union[None, str, dict[str, Optional[int]]], carry_optimizer_state: bool,
           optimizer_changes: dict[str, Any], changes: list[str]) -> dict[str, Any]:
  """The checkpoint's weights and optimizer state carried into `team`: their part of the record."""
  mapping = read_mapping(mapping) if isinstance(mapping, str) else mapping
  optimizer = getattr(team, "optimizer", None)  # Keras 3 has none until compiled.
  alignment = assign_weights(team, legacy, mapping, model_desc=f"{model}'s model",
                             hint=f"give --mapping=<{MAPPING_HELP}>")
  state, missing, differences = _carry_optimizer(team, legacy, alignment, carry_optimizer_state)
  if any(isinstance(layer, keras.layers.BatchNormalization) for layer in team.layers):
    differences = differences + [BATCH_NORM_NOTE]
  return {
      "input": {"name": team.inputs[0].name, "shape": list(team.inputs[0].shape[1:])},
      "classes": int(team.outputs[0].shape[-1]),
      "weights": len(alignment.names),
      "layers": alignment.pairs_record(legacy),
      "optimizer": type(optimizer).__name__ if optimizer is not None else None,
      "optimizer_changes": optimizer_changes,
      "optimizer_state": state,
      "not_carried": alignment.not_carried(legacy) + missing,
      "differences": changes + differences,
  }


def _carry_optimizer(team, legacy: LegacyCheckpoint, alignment,
                     carry_optimizer_state: bool) -> tuple[str, list[str], list[str]]:
  """The step and the optimizer's slots carried into the builder's compiled optimizer, if any.

  Returns:
    (the optimizer state: "carried", "partial" or "fresh", what was not
    carried, the hyperparameters' differences from the checkpoint's), in words.
  """
  optimizer = getattr(team, "optimizer", None)
  if optimizer is None:
    return "fresh", ["the step and the optimizer's state: the builder returns its model "
                     "uncompiled"], []
  missing, slots_carried = carry_builders_optimizer(team, legacy, alignment.names,
                                                    carry_optimizer_state)
  state = "fresh" if not slots_carried else "partial" if missing else "carried"
  return state, missing, hyperparameter_differences(optimizer, legacy)


def _build(builder: registry.Model, args: ModelArgs, legacy: LegacyCheckpoint):
  """The builder's Keras 3 model, its optimizer changed where Keras 3 needs it (keras3_arguments).

  Returns:
    (model, the optimizer's changed arguments, the changes in words).
  """
  team = builder.function(**args)
  if not isinstance(team, keras.Model):
    raise MigrationError(f"--model={builder.name}: {builder.target} returned "
                         f"{type(team).__name__}, not a keras.Model")
  if len(team.inputs) != 1 or len(team.outputs) != 1:
    raise MigrationError(f"--model={builder.name}: {builder.target}'s model has "
                         f"{len(team.inputs)} inputs and {len(team.outputs)} outputs; audioclf "
                         "migrates models of one input and one output")
  optimizer = getattr(team, "optimizer", None)
  if optimizer is None:
    return team, {}, []
  changes, why = keras3_arguments(optimizer, legacy)
  if changes:
    changed = type(optimizer).from_config({**optimizer.get_config(), **changes})
    team.compile_from_config({**team.get_compile_config(),
                              "optimizer": keras.optimizers.serialize(changed)})
  return team, changes, why


def _audio_params(params: Params, model: str, args: ModelArgs, optimizer_changes: dict[str, Any],
                  to_model_dir: str) -> Params:
  """The migrated model_dir's params: the builder's model and optimizer (as changed), at a constant rate."""
  return params.replace(model=model, model_args=args, optimizer=BUILDERS_OPTIMIZER,
                        optimizer_args=ModelArgs(optimizer_changes), lr_schedule="constant",
                        engine="keras", model_dir=to_model_dir).validate()


def _audio_model_dir(team, params: Params) -> dict[str, Any]:
  """The model_dir's model (build_model's, the builder inside), given the team model's state.

  Built by build_model and compile_model, as every audioclf command builds it,
  so its checkpoint restores there. The builder runs a second time for it:
  its layers get other names but the same variables in the same order, and
  take `team`'s values one by one, the optimizer's (step and slots) too.

  Returns:
    {"params", "labels", "model"}.
  """
  labels = manifest_lib.load(params).labels
  try:
    model = models.compile_model(models.build_model(params, len(labels)), params)
  except ParamError as e:
    raise MigrationError(f"no model_dir audioclf trains on: {e}") from e
  whole = next(layer for layer in model.layers if isinstance(layer, keras.Model))
  _copy(whole.weights, team.weights, "weights")
  compat.build_optimizer(model)
  _copy(model.optimizer.variables, team.optimizer.variables, "optimizer variables")
  return {"params": params, "labels": labels, "model": model}


def _copy(targets: list, sources: list, what: str) -> None:
  if len(targets) != len(sources) or any(
      tuple(t.shape) != tuple(s.shape) for t, s in zip(targets, sources)):
    raise MigrationError(f"the builder built two models of different {what} from the same "
                         "arguments: it must build the same model every time")
  for target, source in zip(targets, sources):
    target.assign(source)
