"""What both roads of a team's Estimator share: its builder, the folders, and what is written, whole or not at all."""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import tensorflow as tf

from audioclf import compat
from audioclf.migration.checkpoint import MigrationError
from audioclf.model import model_dir as model_dir_lib
from audioclf.model import registry
from audioclf.params import to_flagfile

KERAS_FILE = "model.keras"
RECORD_FILE = "migration.json"
TRAIN_FLAGS = "train.flags"


def whole_model_builder(model: str) -> registry.Model:
  """The builder `model` names; raises MigrationError for a body's (an Estimator's model is whole)."""
  builder = registry.resolve(model)
  if builder.kind != registry.WHOLE:
    raise MigrationError(f"--model={model}: {builder.target} is a body ({builder.kind} in); an "
                         "Estimator's model is a whole keras.Model, from a builder of keyword "
                         "arguments only")
  return builder


def check_folders(from_model_dir: str, to_model_dir: str) -> None:
  """Raises MigrationError: not on the current stack, no such from_model_dir, to_model_dir not empty."""
  if not compat.KERAS3:
    raise MigrationError(f"audioclf migrate writes Keras 3 models: run it on "
                         f"{compat.HOW_TO_GET[compat.CURRENT_STACK]}")
  if not os.path.isdir(from_model_dir):
    raise MigrationError(f"--from_model_dir {from_model_dir!r} is not a folder")
  if os.path.exists(to_model_dir) and (not os.path.isdir(to_model_dir) or os.listdir(to_model_dir)):
    raise MigrationError(f"--to_model_dir {to_model_dir!r} is not empty: migrate writes a new "
                         "folder and overwrites nothing; choose a new one")


def write(to_model_dir: str, team, record: dict[str, Any], audio: Optional[dict[str, Any]],
          step: int) -> None:
  """The .keras file, the record and (with data) the model_dir: whole or not at all."""

  def write_into(folder: str) -> None:
    team.save(os.path.join(folder, KERAS_FILE))
    with open(os.path.join(folder, RECORD_FILE), "w") as f:
      json.dump(record, f, indent=2)
      f.write("\n")
    if audio is not None:
      params = audio["params"]
      model_dir_lib.prepare(params.replace(model_dir=folder), audio["labels"])
      model_dir_lib.write_params(folder, params, migration=record)
      model_dir_lib.checkpoint_manager(tf.train.Checkpoint(audio["model"]), folder).save(
          checkpoint_number=step)
      to_flagfile(params, os.path.join(folder, TRAIN_FLAGS), header=(
          f"python -m audioclf train --flagfile={os.path.join(to_model_dir, TRAIN_FLAGS)} "
          f"--train_steps=<more than {step}>\n"
          f"resumes the Estimator migrated from {record['from_model_dir']} at step {step}, "
          f"with {record['builder']}'s module on PYTHONPATH."))

  model_dir_lib.write_whole(to_model_dir, write_into)
