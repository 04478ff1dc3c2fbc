"""python -m audioclf.export --model_dir=runs/demo/keras [--export_dir=runs/demo/keras/export]
python -m audioclf.export --model_dir=runs/demo/keras --format=tflite [--quantize=none,int8]

Writes a SavedModel of a model_dir from either engine whose serving signature
takes raw audio: float32 waveforms [batch, clip_samples] at sample_rate; or,
with --format=tflite, TensorFlow Lite models that take the same (audioclf.tflite),
checked against the Keras model on the test split.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

import tensorflow as tf
from absl import app
from absl import flags

import audioclf
from audioclf import cli
from audioclf import model_dir as model_dir_lib
from audioclf import models
from audioclf.compat import keras
from audioclf.models import INPUT_NAME
from audioclf.params import Params

FLAGS = flags.FLAGS


class Classifier(tf.Module):
  """The served model: raw audio in; probabilities and label names out."""

  def __init__(self, model: keras.Model, labels: Sequence[str], clip_samples: int):
    super().__init__()
    self.model = model
    self._labels = tuple(labels)
    self.serve = tf.function(
        self._serve,
        input_signature=[tf.TensorSpec([None, clip_samples], tf.float32, name=INPUT_NAME)])

  def _serve(self, waveform):
    probabilities = self.model(models.inputs(waveform), training=False)
    names = tf.constant(self._labels)
    return {
        "probabilities": probabilities,  # float32 [batch, classes]
        # string [batch, classes]: the label of each probability, per example,
        # as TF Serving's classify API lays out its "classes".
        "label_names": tf.broadcast_to(names, tf.shape(probabilities)),
        "label": tf.gather(names, tf.argmax(probabilities, axis=-1)),  # string [batch]
    }


def export(model_dir: str, export_dir: Optional[str] = None,
           params: Optional[Params] = None) -> str:
  """Writes model_dir's latest model as a SavedModel.

  Its "serving_default" signature takes `waveform`, float32 [batch,
  clip_samples] at params.sample_rate (the log-mel front end is inside), and
  returns `probabilities` float32 [batch, classes], `label_names` string
  [batch, classes] and `label` string [batch]. The run's params.json goes
  beside it (python -m audioclf.evaluate --saved_model reads it).

  Args:
    model_dir: a folder either engine trained.
    export_dir: where to write; default <model_dir>/export.
    params: parameters to use instead of model_dir's params.json.

  Returns:
    export_dir.
  """
  model, params, labels = model_dir_lib.load_model(model_dir, params)
  export_dir = export_dir or os.path.join(model_dir, "export")
  module = Classifier(model, labels, params.clip_samples)
  tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})
  # Beside it, what evaluate --saved_model needs to read data as the model was trained.
  with open(os.path.join(export_dir, model_dir_lib.PARAMS_FILE), "w") as f:
    f.write(params.to_json() + "\n")
  return export_dir


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS.format == "tflite":
    from audioclf import tflite  # pylint: disable=g-import-not-at-top
    result = tflite.export(FLAGS.model_dir, FLAGS.export_dir, cli.params_for_model_dir(),
                           FLAGS.quantize, FLAGS.calibration_clips)
    print(tflite.table(result), flush=True)
    print(model_dir_lib.summary_line(result), flush=True)
    return
  path = export(FLAGS.model_dir, FLAGS.export_dir, cli.params_for_model_dir())
  print(model_dir_lib.summary_line({"model_dir": FLAGS.model_dir, "export_dir": path}), flush=True)


def run():
  cli.define_model_dir_flags()
  flags.mark_flag_as_required("model_dir")
  cli.run(main)


sys.modules[__name__].__class__ = audioclf.CommandModule  # See CommandModule.

if __name__ == "__main__":
  run()
