"""python -m audioclf.evaluate --model_dir=runs/demo/keras [--split=test] [--data_dir=...]

Evaluates the latest checkpoint of a model_dir from either engine on one split
and prints loss and accuracy as one line of JSON.
"""

from __future__ import annotations

from typing import Any, Optional

from absl import app
from absl import flags

from audioclf import cli
from audioclf import manifest as manifest_lib
from audioclf import model_dir as model_dir_lib
from audioclf.params import Params
from audioclf.pipeline import input_fn

FLAGS = flags.FLAGS


def evaluate(model_dir: str, split: str = "validation",
             params: Optional[Params] = None) -> dict[str, Any]:
  """Loss and accuracy of model_dir's latest checkpoint on `split`.

  Args:
    model_dir: a folder either engine trained.
    split: "train", "validation" or "test".
    params: parameters to use instead of model_dir's params.json, e.g. to
      point at other data; the model's own fields must match.

  Returns:
    {"model_dir", "engine", "split", "steps", "files", "loss", "accuracy"}.

  Raises:
    model_dir.ModelDirError: no trained model there, or the data's labels
      differ from the model's.
  """
  engine = model_dir_lib.read_params(model_dir).engine  # First: is it a model_dir at all?
  checkpoint = model_dir_lib.latest_checkpoint(model_dir)  # Once: training may add one meanwhile.
  model, params, labels = model_dir_lib.load_model(model_dir, params, checkpoint)
  manifest = manifest_lib.load(params)
  if list(manifest.labels) != labels:
    raise model_dir_lib.ModelDirError(
        f"the model in {model_dir!r} knows labels {labels}, the data has {list(manifest.labels)}")
  results = model.evaluate(input_fn(params, "eval", split=split, manifest=manifest),
                           return_dict=True, verbose=0)
  return {
      "model_dir": model_dir,
      "engine": engine,
      "split": split,
      "steps": model_dir_lib.checkpoint_step(checkpoint),
      "files": len(manifest.split(split)),
      "loss": float(results["loss"]),
      "accuracy": float(results["accuracy"]),
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  results = evaluate(FLAGS.model_dir, FLAGS.split, cli.params_for_model_dir())
  print(model_dir_lib.summary_line(results), flush=True)


def run():
  cli.define_model_dir_flags()
  flags.mark_flag_as_required("model_dir")
  cli.run(main)


if __name__ == "__main__":
  run()
