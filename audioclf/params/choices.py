"""The named choices and limits of Params' fields, each written once."""

from __future__ import annotations

import re

MODES = ("train", "eval", "infer")  # The strings of tf.estimator.ModeKeys.
SPLITS = ("train", "validation", "test")
# Name -> the Keras optimizer class (the same name in Keras 2 and 3): the one list of optimizers.
OPTIMIZERS = {"adam": "Adam", "sgd": "SGD", "rmsprop": "RMSprop"}
# --optimizer's other choice: the one a whole model's builder compiled its model with (a team's
# model as it trained before, which audioclf.migration carries, with any schedule of its own).
BUILDERS_OPTIMIZER = "model"
# The engines; each is the module audioclf.engines.<name>_engine (audioclf.engines.get).
ENGINES = ("keras", "estimator")
# Name -> keras-tuner's tuner class: the one list of tuners (audioclf.tuning.tuners).
TUNERS = {"random": "RandomSearch", "hyperband": "Hyperband", "bayesian": "BayesianOptimization"}
# A model: a short name registered as an entry point (audioclf.model.registry), or module:function.
MODEL_NAME = re.compile(r"^(?:[A-Za-z_][\w.]*:[A-Za-z_]\w*|[A-Za-z_][\w-]*)$")
# The validation metrics a run can keep its best checkpoint by (and stop early on).
BEST_METRICS = ("val_accuracy", "val_loss")
DATA_SERVICE_ADDRESS = re.compile(r"^grpc://[^:/\s]+:\d+$")
MAX_CLIP_SECONDS = 600
