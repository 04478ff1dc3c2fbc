"""audioclf: audio classifiers whose input pipeline is never the bottleneck.

  import audioclf
  params = audioclf.Params(data_dir="data/speech_words", model_dir="runs/mine")
  ds = audioclf.input_fn(params, "train")     # the tf.data.Dataset both engines read
  metrics = audioclf.train(params)            # what `python -m audioclf train` does

The package, by concern (each folder's __init__ says more):

  params/        Params: every setting of a run, and the one check of every value
  files.py       writing a file whole or not at all (every file audioclf writes in place)
  compat/        every difference between the legacy stack (Keras 2, tf.estimator) and Keras 3
  data/          the data: manifest, decoding, the clip cache, the sampler, input_fn, tf.data service
  synthesis/     keywords from text: spoken-word datasets synthesized with espeak-ng
  model/         the model: front end, builders, model_dir (what a run leaves, and loading it)
  distributed/   TF_CONFIG clusters, the loopback launcher, tf.data service servers
  engines/       training: the Keras loop and the Estimator, the stall meter and step clock
  deploy/        after training: evaluate and its report, predict, long recordings, export, TFLite
  tuning/        hyperparameter search with keras-tuner
  migration/     legacy (Keras 2) model_dirs to Keras 3
  commands/      `python -m audioclf <command>`: every command's flags and main

Each layer imports only those above it in this list; tests/test_package.py checks it.
"""

import importlib

from audioclf.params import Params

__version__ = "0.1.0"

# The public functions, imported on first use so that `import audioclf` stays
# light (no TensorFlow until one is called).
_API = {
    "input_fn": "audioclf.data.pipeline",
    "build_model": "audioclf.model.build",
    "train": "audioclf.engines.train",
    "evaluate": "audioclf.deploy.evaluate",
    "predict": "audioclf.deploy.predict",
    "export": "audioclf.deploy.export",
    "tune": "audioclf.tuning.search",
    "migrate": "audioclf.migration.migrate",
}


def __getattr__(name):
  if name in _API:
    return getattr(importlib.import_module(_API[name]), name)
  raise AttributeError(f"module 'audioclf' has no attribute {name!r}")


__all__ = ["Params", *_API]
