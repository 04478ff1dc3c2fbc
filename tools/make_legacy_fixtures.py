"""Writes tests/fixtures/legacy: tiny legacy model_dirs, so the current stack alone tests migration.

  .venv-legacy/bin/python tools/make_legacy_fixtures.py     # on the legacy stack (TF 2.15, Keras 2)

For each engine (keras, estimator) it trains a width-8 cnn, and with Keras a
user's own model (tools/examples/my_models.py: tiny), for STEPS steps with
Adam on the tone data of tests/conftest.py (`write_tone_dataset`, which the
tests write again identically), and keeps what audioclf.migrate reads:
labels.txt, params.json (the data, cache and model paths cleared: they were
temporary) and the last checkpoint, its `checkpoint` file naming it by a
relative path. Beside them: one held-out clip per class (clips/<label>/) and
each model's probabilities on them, as `python -m audioclf predict
--save_probabilities` writes them (<engine>_probabilities.npz, paths relative to
it). About 150 KB in all; rerun it only when what a legacy model_dir holds changes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tools", "examples"))  # my_models, a user's own model.
# pylint: disable=g-import-not-at-top,wrong-import-position
from conftest import write_tone_dataset

import tensorflow as tf

import audioclf
from audioclf import compat
from audioclf.data import manifest as manifest_lib
from audioclf.model import model_dir as model_dir_lib
from audioclf.deploy import predict as predict_lib

STEPS = 30  # Enough for Adam's averages to be far from a fresh optimizer's.
# Fixture -> what its run changes: both engines' cnn, and a user's own model
# (tools/examples/my_models.py), which migrates with its module on PYTHONPATH.
RUNS = {"keras": dict(engine="keras"), "estimator": dict(engine="estimator"),
        "my_model": dict(engine="keras", model="my_models:tiny",
                         model_args={"blocks": 1, "width": 4})}


def fixture_params(data_dir: str, cache_dir: str) -> audioclf.Params:
  """The legacy runs' parameters; tests/test_migrate.py continues them on the current stack."""
  return audioclf.Params(data_dir=data_dir, cache_dir=cache_dir, validation_percent=25,
                         testing_percent=25, clip_seconds=0.5, batch_size=8, model_args={"width": 8},
                         train_steps=STEPS, eval_every_steps=STEPS, learning_rate=3e-3,
                         log_every_steps=10, seed=0, optimizer="adam")


def copy_model_dir(src: str, dst: str) -> None:
  """labels.txt, a path-free params.json and the latest checkpoint of src, into dst."""
  os.makedirs(dst)
  shutil.copy(os.path.join(src, model_dir_lib.LABELS_FILE), dst)
  with open(os.path.join(src, model_dir_lib.PARAMS_FILE)) as f:
    params = json.load(f)
  params.update(data_dir=None, cache_dir=None, model_dir=None)
  with open(os.path.join(dst, model_dir_lib.PARAMS_FILE), "w") as f:
    json.dump(params, f, indent=2, sort_keys=True)
    f.write("\n")
  latest = tf.train.latest_checkpoint(src)
  for path in tf.io.gfile.glob(f"{latest}.*"):
    if not path.endswith(".meta"):  # The Estimator's graph: large, and migrate never reads it.
      shutil.copy(path, dst)
  tf.compat.v1.train.update_checkpoint_state(dst, os.path.basename(latest),
                                             all_model_checkpoint_paths=[os.path.basename(latest)])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "tests", "fixtures", "legacy"))
  args = parser.parse_args()
  if compat.KERAS3:
    sys.exit("make_legacy_fixtures.py writes legacy-stack model_dirs: run it with "
             ".venv-legacy/bin/python (TensorFlow 2.15, Keras 2)")
  if os.path.exists(args.out_dir):
    shutil.rmtree(args.out_dir)
  os.makedirs(args.out_dir)
  with tempfile.TemporaryDirectory() as tmp:
    params = fixture_params(write_tone_dataset(os.path.join(tmp, "data")),
                            os.path.join(tmp, "cache"))
    manifest = manifest_lib.load(params)
    clips = []
    for label in manifest.labels:  # One held-out clip per class.
      entry = next(e for e in manifest.split("test") if e.label == label)
      clip = os.path.join(args.out_dir, "clips", label, os.path.basename(entry.path))
      os.makedirs(os.path.dirname(clip))
      shutil.copy(entry.path, clip)
      clips.append(clip)
    for name, changes in RUNS.items():
      run = params.replace(model_dir=os.path.join(tmp, name), **changes)
      print(json.dumps(audioclf.train(run)), flush=True)
      copy_model_dir(run.model_dir, os.path.join(args.out_dir, name))
      files, probs, labels = predict_lib.probabilities(run.model_dir, clips)
      predict_lib.save_probabilities(
          os.path.join(args.out_dir, f"{name}_probabilities.npz"),
          [os.path.relpath(f, args.out_dir) for f in files], probs, labels)
  total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.out_dir) for f in fs)
  print(f"wrote {args.out_dir}: {total / 1024:.0f} KB", flush=True)


if __name__ == "__main__":
  main()
