"""Writes tests/fixtures/foreign: Estimators a team built from its own Keras models, not audioclf's.

  .venv-legacy/bin/python tools/make_foreign_estimators.py     # legacy stack (TF 2.15, Keras 2)

For each builder of tests/fixtures/foreign/team_models.py it does what a team's
own code did: `tf.keras.estimator.model_to_estimator` on the compiled model,
then `train` for STEPS steps with the team's input_fn (synthetic numpy data keyed
by the model's input name). It keeps, in <out_dir>/<builder>/:

  model_dir/   `checkpoint` (a relative path) and the latest model.ckpt-<step>.{index,data-*}
               only: no events, graph.pbtxt, .meta, keras/ warm-start or older checkpoints
  parity.npz   x_<input>, probabilities: a fixed batch and the Estimator's predictions on it;
               step_x_<input>, step_y, next_probabilities: one training batch and the
               predictions after one more step on it (trained on a copy of model_dir);
               step: the committed checkpoint's global step
  info.json    builder, input, classes, optimizer and its config, loss, steps, the TF and
               Keras that wrote it, and the checkpoint's variables (name, shape, dtype)

and, for each function of team_estimators.py (Estimators of no Keras model: a
model_fn of tf.compat.v1.layers, one of get_variable's under four TF1
optimizers, a canned DNNClassifier), the same folder, trained with that
function's Estimator: its checkpoint is name-based; its parity.npz also holds
next/<variable>, every variable after the one more step; its info.json names
the function and, for the canned one, its constructor arguments.

Rerunning with the same seeds writes the same bytes (TF's CPU kernels here run
the same arithmetic each time, and parity.npz gets fixed zip timestamps);
tools/check_foreign_fixtures.py --remake checks that. About 330 KB in all, most
of it raw_conv's parity.npz (16 waveforms of 4000 samples).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES_DIR = os.path.join(ROOT, "tests", "fixtures", "foreign")
sys.path.insert(0, FIXTURES_DIR)  # As a team runs it: its module on PYTHONPATH, not a package.
sys.path.insert(1, ROOT)  # audioclf's reading of a canned Estimator's arguments, for info.json.
# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf
import keras

SEED = 0
STEPS = 20  # Enough for the optimizer's slots to be far from a fresh optimizer's.
BATCH_SIZE = 8
TRAIN_EXAMPLES = 64
PARITY_EXAMPLES = 8
BUILDERS = ("team_models:spectrogram_cnn", "team_models:frames_gru", "team_models:raw_conv")


def logmel_examples(rng: np.random.Generator, n: int, shape, classes: int):
  """Noise spectrograms; class k is louder in the k-th quarter of the mel bins."""
  y = rng.integers(0, classes, size=n)
  x = rng.normal(0.0, 0.5, size=(n, *shape))
  band = shape[1] // classes
  for i, k in enumerate(y):
    x[i, :, k * band:(k + 1) * band] += 2.0
  return x.astype(np.float32), y.astype(np.int32)


def mfcc_examples(rng: np.random.Generator, n: int, shape, classes: int):
  """Noise MFCC frames; class k has coefficient k rising over time."""
  y = rng.integers(0, classes, size=n)
  x = rng.normal(0.0, 1.0, size=(n, *shape))
  ramp = np.linspace(-2.0, 2.0, shape[0])
  for i, k in enumerate(y):
    x[i, :, k] += ramp
  return x.astype(np.float32), y.astype(np.int32)


def audio_examples(rng: np.random.Generator, n: int, shape, classes: int):
  """Tones at 16 kHz, class k at 250 * 2**k Hz with a random phase, in a little noise."""
  y = rng.integers(0, classes, size=n)
  t = np.arange(shape[0]) / 16000.0
  phase = rng.uniform(0.0, 2 * np.pi, size=(n, 1))
  x = 0.5 * np.sin(2 * np.pi * (250.0 * 2.0**y[:, None]) * t + phase)
  x += rng.normal(0.0, 0.05, size=x.shape)
  # 16-bit, as decoded from a WAV file: that also lets parity.npz compress to < 200 KB.
  x = np.clip(np.round(x * 32768), -32768, 32767) / 32768
  return x.astype(np.float32), y.astype(np.int32)


# The data each builder's team trains on, by its input name.
EXAMPLES = {"logmel": logmel_examples, "mfcc": mfcc_examples, "audio": audio_examples}


def load_builder(path: str):
  """`module:function` -> the function, with tests/fixtures/foreign on sys.path."""
  module, name = path.split(":")
  return getattr(importlib.import_module(module), name)


def train_input_fn(features: dict, y: np.ndarray):
  """The team's input_fn: shuffled batches of (features dict, labels), forever."""
  def input_fn():
    dataset = tf.data.Dataset.from_tensor_slices((features, y))
    # Shuffle examples before batching, so each batch mixes classes; a fixed seed
    # so a rerun trains on the same batches; repeat last, so train(steps=) ends it.
    return dataset.shuffle(len(y), seed=SEED).batch(BATCH_SIZE).repeat()
  return input_fn


def predict(estimator, input_name: str, x: np.ndarray) -> np.ndarray:
  """The Estimator's softmax output on x, [len(x), classes]."""
  def input_fn():
    return tf.data.Dataset.from_tensor_slices({input_name: x}).batch(len(x))
  # model_to_estimator keys each prediction by the output layer's name: one output here.
  return np.stack([next(iter(p.values())) for p in estimator.predict(input_fn)])


def make_estimator(model, model_dir: str):
  return tf.keras.estimator.model_to_estimator(
      keras_model=model, model_dir=model_dir, config=tf.estimator.RunConfig(tf_random_seed=SEED))


def copy_latest_checkpoint(src: str, dst: str) -> str:
  """The latest checkpoint of src and a `checkpoint` file naming it relatively, into dst."""
  os.makedirs(dst)
  latest = tf.train.latest_checkpoint(src)
  for path in sorted(tf.io.gfile.glob(f"{latest}.*")):
    if not path.endswith(".meta"):  # The graph: large, and a migration never reads it.
      shutil.copy(path, dst)
  name = os.path.basename(latest)
  tf.compat.v1.train.update_checkpoint_state(dst, name, all_model_checkpoint_paths=[name])
  return name


def checkpoint_variables(model_dir: str) -> dict:
  """name -> {shape, dtype} of every variable the latest checkpoint of model_dir holds."""
  path = tf.train.latest_checkpoint(model_dir)
  dtypes = tf.train.load_checkpoint(path).get_variable_to_dtype_map()
  return {name: {"shape": shape, "dtype": dtypes[name].name}
          for name, shape in tf.train.list_variables(path)}


def keras_weights(model) -> dict:
  """The Keras 2 model's [name, shape] of its trainable and non-trainable weights, in its order."""
  return {kind: [[w.name, w.shape.as_list()] for w in getattr(model, f"{kind}_weights")]
          for kind in ("trainable", "non_trainable")}


def save_npz(path: str, arrays: dict) -> None:
  """np.savez_compressed, but with fixed zip timestamps, so that a rerun writes the same bytes."""
  with zipfile.ZipFile(path, "w") as archive:
    for key in sorted(arrays):
      entry = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
      entry.compress_type = zipfile.ZIP_DEFLATED  # A ZipInfo ignores the archive's default.
      with archive.open(entry, "w") as f:
        np.lib.format.write_array(f, np.asarray(arrays[key]), allow_pickle=False)


def write_json(path: str, value: dict) -> None:
  """Indented JSON, each list or object without nested objects on one line (shapes, variables)."""
  text = json.dumps(value, indent=1, sort_keys=True)
  for innermost in (r"\[[^\[\]{}]*\]", r"\{[^{}]*\}"):
    text = re.sub(innermost, lambda match: " ".join(match.group(0).split())
                  .replace("[ ", "[").replace(" ]", "]"), text)
  with open(path, "w") as f:
    f.write(text + "\n")


def written_by() -> dict:
  return {"python": platform.python_version(), "tensorflow": tf.__version__,
          "keras": keras.__version__}


def optimizer_info(optimizer) -> dict:
  config = {k: (float(v) if isinstance(v, (float, np.floating)) else v)
            for k, v in optimizer.get_config().items()}
  # The public name (keras.optimizers.legacy.Adam), not the module that defines it (keras.src...).
  return {"class": f"keras.optimizers.legacy.{type(optimizer).__name__}", "config": config}


def next_step_probabilities(builder, model_dir: str, input_name: str, step_x, step_y,
                            x) -> np.ndarray:
  """Predictions on x after one more training step on (step_x, step_y), from a copy of model_dir."""
  with tempfile.TemporaryDirectory() as tmp:
    copy = os.path.join(tmp, "model_dir")
    shutil.copytree(model_dir, copy)
    keras.utils.set_random_seed(SEED)
    # A new model_to_estimator, as a resumed job makes one: it restores the
    # copy's checkpoint (warm-starting only applies to an empty model_dir).
    estimator = make_estimator(builder(), copy)
    estimator.train(lambda: tf.data.Dataset.from_tensors(({input_name: step_x}, step_y)),
                    steps=1)
    return predict(estimator, input_name, x)


def write_fixture(builder_path: str, out_dir: str, tmp: str) -> None:
  """Trains one builder's Estimator and writes <out_dir>/<builder name>/."""
  name = builder_path.split(":")[1]
  builder = load_builder(builder_path)
  keras.backend.clear_session()  # Layer names as a fresh process gives them: conv2d, dense...
  keras.utils.set_random_seed(SEED)  # The initial weights, which the Estimator warm-starts from.
  model = builder()
  input_name = model.input_names[0]
  shape, classes = list(model.input_shape[1:]), int(model.output_shape[-1])
  examples = EXAMPLES[input_name]
  # Three draws from one seed: training data, the fixed batch, the next-step batch.
  rng = np.random.default_rng(SEED)
  train_x, train_y = examples(rng, TRAIN_EXAMPLES, shape, classes)
  x, _ = examples(rng, PARITY_EXAMPLES, shape, classes)
  step_x, step_y = examples(rng, BATCH_SIZE, shape, classes)

  trained = os.path.join(tmp, name)
  estimator = make_estimator(model, trained)
  estimator.train(train_input_fn({input_name: train_x}, train_y), steps=STEPS)
  fixture = os.path.join(out_dir, name)
  checkpoint = copy_latest_checkpoint(trained, os.path.join(fixture, "model_dir"))
  model_dir = os.path.join(fixture, "model_dir")
  save_npz(os.path.join(fixture, "parity.npz"), {
      f"x_{input_name}": x, "probabilities": predict(estimator, input_name, x),
      "step": np.int64(estimator.get_variable_value(
          "estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE")),
      f"step_x_{input_name}": step_x, "step_y": step_y,
      "next_probabilities": next_step_probabilities(builder, model_dir, input_name, step_x,
                                                    step_y, x)})
  write_json(os.path.join(fixture, "info.json"), {
      "builder": builder_path, "input": {"name": input_name, "shape": shape, "dtype": "float32"},
      "classes": classes, "optimizer": optimizer_info(model.optimizer), "loss": model.loss,
      "metrics": ["accuracy"], "steps": STEPS, "batch_size": BATCH_SIZE, "seed": SEED,
      "checkpoint": checkpoint, "checkpoint_format": "checkpoint (model_to_estimator's default)",
      "keras_weights": keras_weights(model), "written_by": written_by(),
      "variables": checkpoint_variables(model_dir)})


def features_examples(rng: np.random.Generator, n: int, shape, classes: int):
  """Noise feature vectors; class k is one larger in feature k."""
  y = rng.integers(0, classes, size=n)
  x = rng.normal(size=(n, *shape)) + np.eye(classes, shape[0])[y]
  return x.astype(np.float32), y.astype(np.int32)


def frame_stats_examples(rng: np.random.Generator, n: int, shape, classes: int):
  """Per-clip frame statistics (MFCC means, then stds); class k has a larger mean k."""
  y = rng.integers(0, classes, size=n)
  x = rng.normal(0.0, 1.0, size=(n, *shape))
  x[np.arange(n), y] += 2.0
  return x.astype(np.float32), y.astype(np.int32)


# team_estimators.py's Estimators: their features' shapes, classes, data (several 1-D features
# are drawn as one vector and split in this order).
ESTIMATORS = {"layers_cnn": ({"logmel": [20, 16, 1]}, 4, logmel_examples),
              "raw_variables": ({"features": [16]}, 3, features_examples),
              "raw_variables_rmsprop": ({"features": [16]}, 3, features_examples),
              "raw_variables_adagrad": ({"features": [16]}, 3, features_examples),
              "raw_variables_centered": ({"features": [16]}, 3, features_examples),
              "dnn_frames": ({"frames": [26]}, 3, frame_stats_examples),
              "wide_deep_frames": ({"frames": [26], "energy": [2]}, 3, frame_stats_examples)}


def split(x: np.ndarray, shapes: dict) -> dict:
  """x as the features dict: the one feature, or 1-D features cut from x in order."""
  if len(shapes) == 1:
    return {next(iter(shapes)): x}
  ends = np.cumsum([shape[0] for shape in shapes.values()])
  return dict(zip(shapes, np.split(x, ends[:-1], axis=-1)))


def estimator_predict(estimator, features: dict) -> np.ndarray:
  """A model_fn or canned Estimator's `probabilities` on the features, [examples, classes]."""
  def input_fn():
    return tf.data.Dataset.from_tensor_slices(features).batch(PARITY_EXAMPLES)
  return np.stack([p["probabilities"] for p in estimator.predict(input_fn)])


def checkpoint_values(model_dir: str) -> dict:
  """name -> value of every variable of model_dir's latest checkpoint."""
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def next_step(make, model_dir: str, step_features: dict, step_y, features: dict):
  """(predictions on features, every checkpoint variable) after one more step, from a copy of model_dir."""
  with tempfile.TemporaryDirectory() as tmp:
    copy = os.path.join(tmp, "model_dir")
    shutil.copytree(model_dir, copy)
    estimator = make(model_dir=copy)  # Restores the copy's checkpoint, as a resumed job does.
    estimator.train(lambda: tf.data.Dataset.from_tensors((step_features, step_y)), steps=1)
    return estimator_predict(estimator, features), checkpoint_values(copy)


def write_estimator_fixture(name: str, out_dir: str, tmp: str) -> None:
  """Trains team_estimators.<name> (no Keras model) and writes <out_dir>/<name>/.

  Its parity.npz also holds `next/<variable>`: every checkpoint variable after
  the one more step, what the migrated model's next step is compared with.
  """
  import team_estimators  # pylint: disable=g-import-not-at-top
  from audioclf.migration import legacy_estimator  # pylint: disable=g-import-not-at-top
  make = getattr(team_estimators, name)
  shapes, classes, examples = ESTIMATORS[name]
  shape = [sum(s[0] for s in shapes.values())] if len(shapes) > 1 else next(iter(shapes.values()))
  rng = np.random.default_rng(SEED)  # Training data, the fixed batch, the next-step batch.
  train_x, train_y = examples(rng, TRAIN_EXAMPLES, shape, classes)
  x, _ = examples(rng, PARITY_EXAMPLES, shape, classes)
  step_x, step_y = examples(rng, BATCH_SIZE, shape, classes)
  features, step_features = split(x, shapes), split(step_x, shapes)
  trained = os.path.join(tmp, name)
  estimator = make(model_dir=trained)
  estimator.train(train_input_fn(split(train_x, shapes), train_y), steps=STEPS)
  model_dir = os.path.join(out_dir, name, "model_dir")
  checkpoint = copy_latest_checkpoint(trained, model_dir)
  next_probabilities, next_values = next_step(make, model_dir, step_features, step_y, features)
  save_npz(os.path.join(out_dir, name, "parity.npz"), {
      **{f"x_{k}": v for k, v in features.items()},
      "probabilities": estimator_predict(estimator, features),
      "step": np.int64(estimator.get_variable_value("global_step")),
      **{f"step_x_{k}": v for k, v in step_features.items()}, "step_y": step_y,
      "next_probabilities": next_probabilities,
      **{f"next/{key}": value for key, value in next_values.items()}})
  canned = type(estimator).__name__ in legacy_estimator.CANNED
  constructor = legacy_estimator.describe(f"team_estimators:{name}") if canned else None
  write_json(os.path.join(out_dir, name, "info.json"), {
      "estimator": f"team_estimators:{name}",
      **({"input": {"name": next(iter(shapes)), "shape": shape, "dtype": "float32"}}
         if len(shapes) == 1 else {"inputs": {k: {"shape": v, "dtype": "float32"}
                                              for k, v in shapes.items()}}),
      "classes": classes, "constructor": constructor,
      "steps": STEPS, "batch_size": BATCH_SIZE, "seed": SEED, "checkpoint": checkpoint,
      "checkpoint_format": "name-based (tf.compat.v1.train.Saver, the Estimator's own)",
      "written_by": written_by(), "variables": checkpoint_variables(model_dir)})


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out_dir", default=FIXTURES_DIR)
  args = parser.parse_args()
  if int(keras.__version__.split(".")[0]) >= 3:
    sys.exit("make_foreign_estimators.py needs model_to_estimator: run it with "
             ".venv-legacy/bin/python (TensorFlow 2.15, Keras 2)")
  tf.get_logger().setLevel("ERROR")  # The Estimator's INFO lines, one per hook and step.
  os.makedirs(args.out_dir, exist_ok=True)
  names = [path.split(":")[1] for path in BUILDERS] + list(ESTIMATORS)
  for name in names:  # Only the fixtures: the builders and README live beside them.
    shutil.rmtree(os.path.join(args.out_dir, name), ignore_errors=True)
  with tempfile.TemporaryDirectory() as tmp:
    for path in BUILDERS:
      write_fixture(path, args.out_dir, tmp)
    for name in ESTIMATORS:
      write_estimator_fixture(name, args.out_dir, tmp)
  for name in names:
    folder = os.path.join(args.out_dir, name)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    print(f"wrote {folder}: {size / 1024:.1f} KB", flush=True)


if __name__ == "__main__":
  main()
