"""python -m audioclf.migrate --from_model_dir=runs/old --to_model_dir=runs/old-keras3 [--report]

Turns a model_dir the legacy stack wrote (TensorFlow 2.15, Keras 2; either
engine) into one the current stack (Keras 3) trains, evaluates, predicts and
exports from, and prints one line of JSON saying what it carried.

It runs on the current stack alone: the legacy checkpoint is read with
`tf.train.load_checkpoint`, which needs no Keras 2. Both legacy engines save a
checkpoint rooted at the Keras model, keyed `layer_with_weights-<i>/<weight>`;
the i-th layer of the same model built with Keras 3 that has weights gets
layer i's values (Keras 3 keys its own checkpoints by other names, so the
values are assigned, then saved the way the Keras engine saves them). Also
carried: the step, labels.txt, params.json (engine "keras", the new stack
recorded, and a "migration" record), and the optimizer's state, so training
resumes where it stopped instead of restarting Adam's or RMSprop's averages:

  legacy checkpoint                             Keras 3 optimizer
  Estimator (Keras 2 legacy optimizer):
    <weight>/.OPTIMIZER_SLOT/optimizer/m, v      momentum, velocity     (Adam)
    <weight>/.OPTIMIZER_SLOT/optimizer/rms       velocity               (RMSprop)
    estimator_global_step                        iterations
  Keras fit (Keras 2 optimizer):
    optimizer/_variables/<n>, in the order the   momentum, velocity (Adam: per weight, m then v);
    optimizer built them over the trainable      velocity (RMSprop: one per weight)
    weights
    optimizer/_iterations                        iterations

SGD has no state but its step. The learning rate (and a cosine schedule, a
function of the step) comes from params.json, as on any resume. State that
does not map (another optimizer's slots, a slot count that does not fit) is
left fresh, and the output and the record say so.

--report compares the legacy model with the migrated one on the same held-out
clips: per-class accuracy of each, and the largest difference between their
probabilities. The legacy model's probabilities must come from the legacy
stack, which this process is not, so they come from a file
`python -m audioclf.predict --save_probabilities=` wrote there
(--legacy_probabilities=), or from a legacy Python this command runs for that
(--legacy_python=, default $AUDIOCLF_LEGACY_PYTHON, else the checkout's
.venv-legacy). The clips are then the --split of the model's data (the file's
own clips when one is given); their true labels come from the data's manifest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

import audioclf
from audioclf import cli
from audioclf import compat
from audioclf import manifest as manifest_lib
from audioclf import model_dir as model_dir_lib
from audioclf import models
from audioclf import predict as predict_lib
from audioclf.params import Params

FLAGS = flags.FLAGS

LEGACY_PROBABILITIES_FILE = "legacy_probabilities.npz"  # What --report keeps in to_model_dir.

_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
_LAYER_PREFIX = "layer_with_weights-"
_SLOT_MARK = "/.OPTIMIZER_SLOT/optimizer/"
_KERAS2_OPTIMIZER_VARIABLES = "optimizer/_variables/"

# Keras 3's name of each slot of Keras 2's legacy optimizers (the Estimator's),
# saved per weight as <weight>/.OPTIMIZER_SLOT/optimizer/<slot>.
_PER_WEIGHT_SLOTS = {"m": "momentum", "v": "velocity", "rms": "velocity", "momentum": "momentum"}
# How Keras 2's optimizers lay their slots out in optimizer._variables (after
# the step): Adam makes m and v weight by weight, RMSprop one velocity per
# weight, SGD one momentum per weight. Keras 2.15's adam.py, rmsprop.py and
# sgd.py `build`; audioclf's optimizers have no amsgrad or centering, so these
# are all there is.
_ORDERED_SLOTS = {"adam": ("momentum", "velocity"), "rmsprop": ("velocity",), "sgd": ("momentum",)}
# Slots Keras 2 keeps whose value the next step never reads where Keras 3 makes
# none: SGD without momentum stores its last step in m, and multiplies it by 0.
_UNREAD_SLOTS = {("sgd", "momentum")}


class MigrationError(model_dir_lib.ModelDirError):
  """The model_dirs cannot be migrated as asked; the message says why."""


@dataclasses.dataclass
class LegacyCheckpoint:
  """What a legacy (Keras 2) checkpoint holds, read without Keras 2.

  Attributes:
    path: the checkpoint's prefix.
    step: the global step it was saved at.
    layers: per layer with weights, in model order: weight name -> value.
    slots: "per_weight" (Keras 2's legacy optimizers, the Estimator's: slots
      keyed by weight), "ordered" (Keras 2's optimizers: one list) or
      None (no optimizer state at all).
    per_weight: (layer, weight name) -> {Keras 3 slot name: value}.
    ordered: the Keras 2 optimizer's slot values, in creation order.
    unknown_slots: legacy slot names this module cannot map.
  """
  path: str
  step: int
  layers: list[dict[str, np.ndarray]]
  slots: Optional[str]
  per_weight: dict[tuple[int, str], dict[str, np.ndarray]]
  ordered: list[np.ndarray]
  unknown_slots: list[str]

  @classmethod
  def read(cls, path: str) -> "LegacyCheckpoint":
    """Reads a checkpoint a legacy engine wrote.

    Raises:
      MigrationError: the checkpoint is not of a Keras 2 model audioclf wrote.
    """
    reader = tf.train.load_checkpoint(path)
    names = [name for name in reader.get_variable_to_shape_map() if name.endswith(_VALUE)]
    if compat.checkpoint_keras_major(names) != 2:
      raise MigrationError(f"{path!r} is not a Keras 2 checkpoint (no {_LAYER_PREFIX}<i> keys): "
                           "not a model_dir of the legacy stack")
    try:
      step = model_dir_lib.checkpoint_step(path)
    except model_dir_lib.ModelDirError as e:
      raise MigrationError(str(e)) from e
    layers: dict[int, dict[str, np.ndarray]] = {}
    per_weight: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    ordered: dict[int, np.ndarray] = {}
    unknown = []
    for name in names:
      key = name[:-len(_VALUE)]
      if key.startswith(_LAYER_PREFIX):
        layer, _, rest = key[len(_LAYER_PREFIX):].partition("/")
        weight, _, slot = rest.partition(_SLOT_MARK)
        if not slot:
          layers.setdefault(int(layer), {})[weight] = reader.get_tensor(name)
        elif slot in _PER_WEIGHT_SLOTS:
          per_weight.setdefault((int(layer), weight), {})[_PER_WEIGHT_SLOTS[slot]] = (
              reader.get_tensor(name))
        else:
          unknown.append(slot)
      elif key.startswith(_KERAS2_OPTIMIZER_VARIABLES):
        ordered[int(key[len(_KERAS2_OPTIMIZER_VARIABLES):])] = reader.get_tensor(name)
    if sorted(layers) != list(range(len(layers))):
      raise MigrationError(f"{path!r} lacks some {_LAYER_PREFIX}<i> of 0..{max(layers)}")
    return cls(path=path, step=step, layers=[layers[i] for i in range(len(layers))],
               slots="per_weight" if per_weight else "ordered" if ordered else None,
               per_weight=per_weight, ordered=[ordered[i] for i in sorted(ordered)],
               unknown_slots=sorted(set(unknown)))


def layers_with_weights(model) -> list:
  """The model's layers with weights, in the order Keras 2 numbered `layer_with_weights-<i>`."""
  return [layer for layer in model.layers if layer.weights]


def _pair_weights(layer, legacy: dict[str, np.ndarray], index: int, where: str) -> list:
  """(variable, legacy name) for each weight of `layer`: by name, else the one left on each side.

  Names agree but for a few a layer renamed (Keras 2's DepthwiseConv2D
  `depthwise_kernel` is Keras 3's `kernel`).

  Raises:
    MigrationError: the weights differ in number or shape.
  """
  variables = {v.name.split(":")[0].rsplit("/", 1)[-1]: v for v in layer.weights}
  pairs = [(v, name) for name, v in variables.items() if name in legacy]
  left = [name for name in variables if name not in legacy]
  left_legacy = [name for name in legacy if name not in variables]
  if len(left) == len(left_legacy) == 1:
    pairs.append((variables[left[0]], left_legacy[0]))
  elif left or left_legacy or len(variables) != len(legacy):
    raise MigrationError(
        f"{where}: layer {layer.name!r} (the model's layer with weights number {index}) has "
        f"weights {sorted(variables)}, the checkpoint's {_LAYER_PREFIX}{index} has "
        f"{sorted(legacy)}: another architecture")
  for v, name in pairs:
    if tuple(v.shape) != legacy[name].shape:
      raise MigrationError(
          f"{where}: {layer.name}/{name} is {list(legacy[name].shape)} in the checkpoint but "
          f"{list(v.shape)} in the model params.json describes: another architecture")
  return pairs


def assign_weights(model, legacy: LegacyCheckpoint) -> dict[int, tuple[int, str]]:
  """Gives each weight of `model` its value from `legacy`.

  Returns:
    id(variable) -> (legacy layer index, weight name), for the optimizer's slots.

  Raises:
    MigrationError: the model and the checkpoint differ in layers or weights.
  """
  layers = layers_with_weights(model)
  if len(layers) != len(legacy.layers):
    raise MigrationError(
        f"{legacy.path!r} holds {len(legacy.layers)} layers with weights, the model params.json "
        f"describes has {len(layers)}: another architecture")
  names = {}
  for i, (layer, values) in enumerate(zip(layers, legacy.layers)):
    for variable, name in _pair_weights(layer, values, i, legacy.path):
      variable.assign(values[name])
      names[id(variable)] = (i, name)
  return names


def assign_optimizer_state(model, legacy: LegacyCheckpoint, names: dict[int, tuple[int, str]],
                           optimizer_name: str, slots: bool = True) -> list[str]:
  """Sets the optimizer's step and, where they map, its slots from `legacy`.

  Args:
    model: the compiled Keras 3 model, its weights assigned by assign_weights.
    legacy: the checkpoint.
    names: what assign_weights returned.
    optimizer_name: params.optimizer ("adam", "rmsprop", "sgd").
    slots: False leaves every slot as a new optimizer starts it (zeros).

  Returns:
    What was not carried, one sentence each; empty when all of it was.

  Raises:
    MigrationError: a slot whose shape differs from its weight's.
  """
  optimizer = model.optimizer
  optimizer.build(model.trainable_variables)
  optimizer.iterations.assign(legacy.step)
  if not slots:
    return ["the optimizer's slots (--nocarry_optimizer_state)"]
  # Keras 3 names a slot `<weight path with _ for />_<slot>` (add_variable_from_reference).
  slot_vars = {v.name: v for v in optimizer.variables
               if v is not optimizer.iterations and v.name != "learning_rate"}
  values: dict[tuple[str, str], np.ndarray] = {}  # (Keras 3 name, slot) -> value.
  missing = []
  if legacy.slots == "per_weight":
    for variable in model.trainable_variables:
      for slot, value in legacy.per_weight.get(names[id(variable)], {}).items():
        values[(f"{variable.path.replace('/', '_')}_{slot}", slot)] = value
  elif legacy.slots == "ordered":
    layout = _ORDERED_SLOTS.get(optimizer_name)
    n = len(model.trainable_variables)
    if layout is None or len(legacy.ordered) != n * len(layout):
      missing.append(f"the Keras 2 {optimizer_name} optimizer's {len(legacy.ordered)} "
                     f"state variables do not fit {n} trainable weights")
    else:
      # Adam's build makes m and v weight by weight (interleaved); a single
      # slot (RMSprop's velocity) is one per weight either way.
      for j, variable in enumerate(model.trainable_variables):
        for k, slot in enumerate(layout):
          values[(f"{variable.path.replace('/', '_')}_{slot}", slot)] = (
              legacy.ordered[j * len(layout) + k])
  if legacy.unknown_slots:
    missing.append(f"legacy slots {legacy.unknown_slots} have no Keras 3 {optimizer_name} "
                   "counterpart")
  for (name, slot), value in values.items():
    variable = slot_vars.get(name)
    if variable is None and (optimizer_name, slot) in _UNREAD_SLOTS:
      continue
    if variable is None:
      missing.append(f"the legacy slot for {name} has no place in Keras 3's {optimizer_name}")
    elif tuple(variable.shape) != value.shape:
      raise MigrationError(f"{legacy.path!r}: optimizer slot {name} is {list(value.shape)}, the "
                           f"model's {list(variable.shape)}: another architecture")
    else:
      variable.assign(value)
  fresh = sorted(set(slot_vars) - {name for name, _ in values})
  if fresh and not missing:
    missing.append(f"{len(fresh)} of Keras 3's {len(slot_vars)} {optimizer_name} state "
                   f"variables have no value in the checkpoint (e.g. {fresh[0]}); they start fresh")
  return missing


def find_checkpoint(model_dir: str) -> str:
  """The latest checkpoint of a legacy model_dir, also after the folder was moved.

  The Estimator records absolute paths in its `checkpoint` file; a model_dir
  copied elsewhere still names the old ones. The same file name in model_dir
  is then the checkpoint meant.

  Raises:
    MigrationError: model_dir holds no checkpoint.
  """
  state = tf.train.get_checkpoint_state(model_dir)
  if state and state.model_checkpoint_path:
    for path in (state.model_checkpoint_path,
                 os.path.join(model_dir, os.path.basename(state.model_checkpoint_path))):
      if tf.io.gfile.exists(f"{path}.index"):
        return path
  raise MigrationError(f"{model_dir!r} holds no checkpoint (no `checkpoint` file naming an "
                       "existing model.ckpt-<step>.index): nothing to migrate")


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
    or "partial"), not_carried (sentences), to_model_dir.

  Raises:
    MigrationError: not on the current stack; from_model_dir is not a legacy
      model_dir or has no checkpoint; to_model_dir is not empty; the
      checkpoint does not fit the model its params.json describes.
  """
  if not compat.KERAS3:
    raise MigrationError(f"audioclf.migrate writes Keras 3 model_dirs: run it on "
                         f"{compat.HOW_TO_GET[compat.CURRENT_STACK]}")
  if not os.path.isdir(from_model_dir):
    raise MigrationError(f"--from_model_dir {from_model_dir!r} is not a folder")
  try:
    saved = model_dir_lib.read_params(from_model_dir)
    labels = model_dir_lib.read_labels(from_model_dir)
    stack = model_dir_lib.written_by(from_model_dir)
  except model_dir_lib.ModelDirError as e:
    raise MigrationError(f"--from_model_dir: {e}") from e
  if int(stack["keras"]) != 2:
    raise MigrationError(f"{from_model_dir!r} was written by the {stack['name']} stack (Keras "
                         f"{stack['keras']}): it needs no migration")
  if os.path.exists(to_model_dir) and (not os.path.isdir(to_model_dir) or os.listdir(to_model_dir)):
    raise MigrationError(f"--to_model_dir {to_model_dir!r} is not empty: migrate writes a new "
                         "model_dir and overwrites nothing; choose a new folder")
  legacy = LegacyCheckpoint.read(find_checkpoint(from_model_dir))

  params = saved.replace(engine="keras", model_dir=to_model_dir)
  model = models.compile_model(models.build_model(params, len(labels)), params)
  names = assign_weights(model, legacy)
  not_carried = assign_optimizer_state(model, legacy, names, params.optimizer,
                                       slots=carry_optimizer_state)
  if carry_optimizer_state and legacy.slots is None and _ORDERED_SLOTS.get(params.optimizer):
    not_carried.append(f"the checkpoint holds no {params.optimizer} state")
  record = {
      "from_model_dir": os.path.abspath(from_model_dir),
      "from_engine": saved.engine,
      "from_stack": stack,
      "checkpoint": os.path.basename(legacy.path),
      "steps": legacy.step,
      "weights": len(names),
      "optimizer": params.optimizer,
      "optimizer_state": ("carried" if not not_carried else
                          "fresh" if not carry_optimizer_state or legacy.slots is None else
                          "partial"),
      "not_carried": not_carried,
      "learning_rate": f"{params.lr_schedule}, from params.json"
                       + (" (a function of the carried step)" if params.lr_schedule != "constant"
                          else ""),
  }
  # Written beside the target and renamed into place: a failure leaves no half model_dir.
  parent = os.path.dirname(os.path.abspath(to_model_dir))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=".migrate-", dir=parent)
  try:
    model_dir_lib.prepare(params.replace(model_dir=tmp), labels)
    model_dir_lib.write_params(tmp, params, migration=record)
    model_dir_lib.checkpoint_manager(tf.train.Checkpoint(model), tmp).save(
        checkpoint_number=legacy.step)
    if os.path.isdir(to_model_dir):
      os.rmdir(to_model_dir)  # Empty, checked above.
    os.rename(tmp, to_model_dir)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return {**record, "to_model_dir": to_model_dir}


# --- The parity report.


def legacy_python() -> Optional[str]:
  """The legacy stack's Python: $AUDIOCLF_LEGACY_PYTHON or the checkout's .venv-legacy, or None."""
  path = os.environ.get("AUDIOCLF_LEGACY_PYTHON")
  if path:
    return path
  checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.path.join(checkout, ".venv-legacy", "bin", "python")
  return path if os.path.isfile(path) else None


def legacy_probabilities(python: str, from_model_dir: str, files: Sequence[str], out: str,
                         params: Optional[Params] = None, timeout: float = 600) -> None:
  """Runs `python -m audioclf.predict --save_probabilities=out` with the legacy stack's Python.

  This checkout's audioclf is put first on the subprocess's path, so both
  stacks run the same code.

  Raises:
    MigrationError: the legacy run failed (its stderr's end in the message).
  """
  checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      p for p in (checkout, os.environ.get("PYTHONPATH")) if p))
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  overrides = []
  if params is not None:
    overrides = [f"--batch_size={params.batch_size}", f"--on_bad_file={params.on_bad_file}"]
  cmd = [python, "-m", "audioclf.predict", f"--model_dir={from_model_dir}",
         f"--save_probabilities={out}", *overrides, "--", *files]
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
  if proc.returncode != 0 or not os.path.isfile(out):
    raise MigrationError(f"the legacy model's predictions failed ({python} -m audioclf.predict, "
                         f"exit {proc.returncode}): {proc.stderr[-2000:]}")


def per_class_accuracy(probs: np.ndarray, truth: np.ndarray, labels: Sequence[str]
                       ) -> dict[str, Optional[float]]:
  """Accuracy on the clips of each class (None for a class without clips)."""
  predicted = np.argmax(probs, axis=1)
  return {label: (float(np.mean(predicted[truth == i] == i)) if np.any(truth == i) else None)
          for i, label in enumerate(labels)}


def parity_report(from_model_dir: str, to_model_dir: str, params: Optional[Params] = None,
                  split: str = "validation", probabilities_file: Optional[str] = None,
                  python: Optional[str] = None) -> dict[str, Any]:
  """The legacy and the migrated model on the same held-out clips, side by side.

  Args:
    from_model_dir: the legacy model_dir.
    to_model_dir: its migration.
    params: the data to take clips and true labels from, and the batch size
      (default to_model_dir's params.json).
    split: the split whose clips are compared, unless probabilities_file is given.
    probabilities_file: what `audioclf.predict --save_probabilities` wrote on
      the legacy stack: its clips are compared.
    python: the legacy stack's Python, run to compute the legacy
      probabilities when no file is given (default `legacy_python()`).

  Returns:
    {"clips", "split", "labels", "legacy_accuracy", "migrated_accuracy",
    "legacy_per_class", "migrated_per_class", "max_abs_difference",
    "same_prediction" (share of clips whose top class agrees), "legacy_source"}.

  Raises:
    MigrationError: no source of legacy probabilities, a failed legacy run, or
      clips the data does not hold.
  """
  params = params or model_dir_lib.read_params(to_model_dir)
  labels = model_dir_lib.read_labels(to_model_dir)
  manifest = manifest_lib.load(params)
  truth_of = {os.path.realpath(e.path): e.label for s in ("train", "validation", "test")
              for e in manifest.split(s)}
  if probabilities_file is None:
    python = python or legacy_python()
    if not python:
      raise MigrationError(
          "--report needs the legacy model's probabilities from the legacy stack: give "
          "--legacy_python=<its python> (or set AUDIOCLF_LEGACY_PYTHON), or "
          "--legacy_probabilities=<a file `python -m audioclf.predict --save_probabilities=` "
          "wrote there>")
    files = [e.path for e in manifest.split(split)]
    if not files:
      raise MigrationError(f"the {split} split of {params.data_dir or params.manifest!r} is empty")
    probabilities_file = os.path.join(to_model_dir, LEGACY_PROBABILITIES_FILE)
    legacy_probabilities(python, from_model_dir, files, probabilities_file, params)
    source = f"{python} -m audioclf.predict"
  else:
    source = probabilities_file
    split = None
  files, legacy, legacy_labels = predict_lib.load_probabilities(probabilities_file)
  if legacy_labels != labels:
    raise MigrationError(f"{probabilities_file!r} is of a model with labels {legacy_labels}, "
                         f"{to_model_dir!r} has {labels}")
  unknown = [f for f in files if os.path.realpath(f) not in truth_of]
  if unknown:
    raise MigrationError(f"{len(unknown)} clips of {probabilities_file!r} are not in the data "
                         f"{params.data_dir or params.manifest!r}, e.g. {unknown[0]!r}")
  migrated_files, migrated, _ = predict_lib.probabilities(
      to_model_dir, files, params.replace(on_bad_file="fail"))
  truth = np.array([labels.index(truth_of[os.path.realpath(f)]) for f in files])
  legacy_per_class = per_class_accuracy(legacy, truth, labels)
  migrated_per_class = per_class_accuracy(migrated, truth, labels)
  return {
      "clips": len(files),
      "split": split,
      "labels": labels,
      "legacy_accuracy": float(np.mean(np.argmax(legacy, 1) == truth)),
      "migrated_accuracy": float(np.mean(np.argmax(migrated, 1) == truth)),
      "legacy_per_class": legacy_per_class,
      "migrated_per_class": migrated_per_class,
      "max_abs_difference": float(np.max(np.abs(legacy - migrated))),
      "same_prediction": float(np.mean(np.argmax(legacy, 1) == np.argmax(migrated, 1))),
      "legacy_source": source,
  }


def report_table(report: dict[str, Any]) -> str:
  """The parity report as a plain-text table: one row per class, then the totals."""
  def cell(value):
    return f"{value:9.3f}" if value is not None else f"{'-':>9s}"

  width = max(len("class"), *(len(label) for label in report["labels"]))
  lines = [f"{'class':<{width}s} {'legacy':>9s} {'migrated':>9s}"]
  for label in report["labels"]:
    lines.append(f"{label:<{width}s} {cell(report['legacy_per_class'][label])} "
                 f"{cell(report['migrated_per_class'][label])}")
  lines.append(f"{'all':<{width}s} {cell(report['legacy_accuracy'])} "
               f"{cell(report['migrated_accuracy'])}")
  lines.append(f"{report['clips']} clips; max |p_legacy - p_migrated| = "
               f"{report['max_abs_difference']:.3g}; same top class on "
               f"{100 * report['same_prediction']:.1f}%")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  result = migrate(FLAGS.from_model_dir, FLAGS.to_model_dir, FLAGS.carry_optimizer_state)
  for sentence in result["not_carried"]:
    print(f"audioclf.migrate: not carried: {sentence}", file=sys.stderr, flush=True)
  if FLAGS.report:
    params = cli.params_for_model_dir(model_dir=FLAGS.to_model_dir)
    report = parity_report(FLAGS.from_model_dir, FLAGS.to_model_dir, params, FLAGS.split,
                           FLAGS.legacy_probabilities, FLAGS.legacy_python)
    print(report_table(report), flush=True)
    print(json.dumps({"report": report}), flush=True)
    result["report"] = report
  print(model_dir_lib.summary_line(result), flush=True)


def run():
  cli.define_migrate_flags()
  flags.mark_flags_as_required(["from_model_dir", "to_model_dir"])
  cli.run(main)


sys.modules[__name__].__class__ = audioclf.CommandModule  # See CommandModule.

if __name__ == "__main__":
  run()
