"""migrate(): a legacy model_dir as the current stack's Keras engine would write it, whole or not at all."""

from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

from audioclf import compat
from audioclf.migration.checkpoint import LegacyCheckpoint, MigrationError, find_checkpoint
from audioclf.migration.optimizer import ORDERED_SLOTS, assign_optimizer_state
from audioclf.migration.weights import assign_weights
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import Params


def migrate(from_model_dir: str, to_model_dir: str,
            carry_optimizer_state: bool = True) -> dict[str, Any]:
  """Writes to_model_dir: from_model_dir's legacy model, as the current stack's Keras engine would.

  Args:
    from_model_dir: a model_dir the legacy stack wrote, with either engine.
    to_model_dir: a folder that does not exist yet, or is empty.
    carry_optimizer_state: False leaves the optimizer's slots fresh (at the
      carried step), as a new optimizer would start; for comparisons.

  Returns:
    The migration record, also kept in to_model_dir's params.json under
    "migration": from_model_dir, from_engine, from_stack, checkpoint, steps,
    weights (values carried), optimizer, optimizer_state ("carried", "fresh"
    or "partial"), not_carried (sentences), best ({"metric", "value",
    "step"} of the best checkpoint --keep_best kept, carried into
    to_model_dir/best/ the same way; None without one), to_model_dir.
    Training resumes from the carried latest checkpoint; evaluate, predict
    and export take the carried best.

  Raises:
    MigrationError: not on the current stack; from_model_dir is not a legacy
      model_dir or has no checkpoint; to_model_dir is not empty; the
      checkpoint does not fit the model its params.json describes.
  """
  saved, labels, stack = _read_legacy(from_model_dir, to_model_dir)
  legacy = LegacyCheckpoint.read(find_checkpoint(from_model_dir))
  best = model_dir_lib.best_record(from_model_dir)
  params = saved.replace(engine="keras", model_dir=to_model_dir)
  model, names, not_carried = _carry(params, labels, legacy, carry_optimizer_state)
  record = {
      "from_model_dir": os.path.abspath(from_model_dir),
      "from_engine": saved.engine,
      "from_stack": stack,
      "checkpoint": os.path.basename(legacy.path),
      "steps": legacy.step,
      "weights": len(names),
      "optimizer": params.optimizer,
      "optimizer_state": _optimizer_state(not_carried, carry_optimizer_state, legacy),
      "not_carried": not_carried,
      "learning_rate": _learning_rate(params),
      "best": {k: best[k] for k in ("metric", "value", "step")} if best else None,
  }

  legacy_best = (LegacyCheckpoint.read(model_dir_lib.choose_checkpoint(from_model_dir, "best").path)
                 if best is not None else None)

  def write(folder: str) -> None:
    model_dir_lib.prepare(params.replace(model_dir=folder), labels)
    model_dir_lib.write_params(folder, params, migration=record)
    model_dir_lib.checkpoint_manager(tf.train.Checkpoint(model), folder).save(
        checkpoint_number=legacy.step)
    if legacy_best is not None:
      _write_best(folder, best, _carry(params, labels, legacy_best, carry_optimizer_state)[0])

  model_dir_lib.write_whole(to_model_dir, write)
  return {**record, "to_model_dir": to_model_dir}


def _optimizer_state(not_carried: list[str], carry_optimizer_state: bool,
                     legacy: LegacyCheckpoint) -> str:
  """The record's optimizer_state: "carried", "fresh" or "partial"."""
  if not not_carried:
    return "carried"
  return "fresh" if not carry_optimizer_state or legacy.slots is None else "partial"


def _learning_rate(params: Params) -> str:
  """The record's learning_rate: where the migrated run's schedule comes from."""
  carried = " (a function of the carried step)" if params.lr_schedule != "constant" else ""
  return f"{params.lr_schedule}, from params.json{carried}"


def _read_legacy(from_model_dir: str, to_model_dir: str):
  """(params, labels, stack record) of a legacy model_dir, checked fit to migrate into to_model_dir.

  Raises:
    MigrationError: see migrate.
  """
  if not compat.KERAS3:
    raise MigrationError(f"audioclf migrate writes Keras 3 model_dirs: run it on "
                         f"{compat.HOW_TO_GET[compat.CURRENT_STACK]}")
  if not os.path.isdir(from_model_dir):
    raise MigrationError(f"--from_model_dir {from_model_dir!r} is not a folder")
  try:
    saved = model_dir_lib.read_params(from_model_dir)
    labels = model_dir_lib.read_labels(from_model_dir)
    stack = model_dir_lib.written_by(from_model_dir)
  except model_dir_lib.ModelDirError as e:
    hint = ("; for an Estimator of the team's own, give --model=<its builder, or a model_fn's "
            "Keras 3 rewrite> or --estimator=<the module:function returning a canned one>"
            if model_dir_lib.own_latest_checkpoint(from_model_dir) else "")
    raise MigrationError(f"--from_model_dir: {e}{hint}") from e
  if int(stack["keras"]) != 2:
    raise MigrationError(f"{from_model_dir!r} was written by the {stack['name']} stack (Keras "
                         f"{stack['keras']}): it needs no migration")
  if os.path.exists(to_model_dir) and (not os.path.isdir(to_model_dir) or os.listdir(to_model_dir)):
    raise MigrationError(f"--to_model_dir {to_model_dir!r} is not empty: migrate writes a new "
                         "model_dir and overwrites nothing; choose a new folder")
  return saved, labels, stack


def _carry(params, labels, legacy: LegacyCheckpoint, carry_optimizer_state: bool):
  """A compiled Keras 3 model holding `legacy`'s weights (and optimizer state, if asked).

  Returns:
    (model, the weights' names, what could not be carried: sentences).
  """
  model = models.compile_model(models.build_model(params, len(labels)), params)
  names = assign_weights(model, legacy).names
  not_carried = assign_optimizer_state(model, legacy, names, params.optimizer,
                                       slots=carry_optimizer_state)
  if carry_optimizer_state and legacy.slots is None and ORDERED_SLOTS.get(params.optimizer):
    not_carried.append(f"the checkpoint holds no {params.optimizer} state")
  return model, names, not_carried


def _write_best(model_dir: str, record: dict[str, Any], model) -> None:
  """model_dir/best/: the migrated best checkpoint, and the legacy run's record of it."""
  folder = os.path.join(model_dir, model_dir_lib.BEST_DIR)
  path = model_dir_lib.checkpoint_manager(tf.train.Checkpoint(model), folder, max_to_keep=1).save(
      checkpoint_number=record["step"])
  with open(os.path.join(folder, model_dir_lib.BEST_FILE), "w") as f:
    f.write(json.dumps(dict(record, checkpoint=os.path.basename(path)), indent=1) + "\n")
