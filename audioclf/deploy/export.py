"""A model_dir (either engine) as a SavedModel whose serving signature takes raw audio.

`python -m audioclf export` runs it (audioclf.commands.export); `--format=tflite`
goes to audioclf.deploy.tflite instead.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import tensorflow as tf

from audioclf.compat import keras
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.model.build import INPUT_NAME
from audioclf.params import Params


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
           params: Optional[Params] = None, checkpoint: str = "best") -> str:
  """Writes a model_dir's model as a SavedModel: its best checkpoint by default.

  Its "serving_default" signature takes `waveform`, float32 [batch,
  clip_samples] at params.sample_rate (the log-mel front end is inside), and
  returns `probabilities` float32 [batch, classes], `label_names` string
  [batch, classes] and `label` string [batch]. The run's params.json goes
  beside it (python -m audioclf evaluate --saved_model reads it).

  Args:
    model_dir: a folder either engine trained.
    export_dir: where to write; default <model_dir>/export.
    params: parameters to use instead of model_dir's params.json.
    checkpoint: best (the one --keep_best kept, where there is one, else the
      latest), last, or a checkpoint's path (model_dir.choose_checkpoint).

  Returns:
    export_dir.
  """
  model, params, labels = model_dir_lib.load_model(model_dir, params, checkpoint)
  export_dir = export_dir or os.path.join(model_dir, "export")
  module = Classifier(model, labels, params.clip_samples)
  tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})
  # Beside it, what evaluate --saved_model needs to read data as the model was trained.
  with open(os.path.join(export_dir, model_dir_lib.PARAMS_FILE), "w") as f:
    f.write(params.to_json() + "\n")
  return export_dir
