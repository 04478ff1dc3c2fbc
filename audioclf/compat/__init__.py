"""Every difference between the two stacks audioclf runs on, and nothing else.

  legacy   Python 3.11, TensorFlow 2.15, Keras 2.15 (tf.keras), tf.estimator: both engines
  current  Python 3.12 / 3.13, TensorFlow >= 2.20, Keras 3 on its TensorFlow backend:
           everything but the Estimator engine (TF >= 2.16 ships no tf.estimator)

The rest of audioclf imports Keras from here (`from audioclf.compat import keras`)
and calls the small functions below where the two stacks differ, as
keras-tuner's `keras_tuner/backend/` does: no other module asks which Keras it
runs on. By job:

  stack.py        which stack this is; StackError, require_estimator
  training.py     optimizer families, the learning phase, fit under replicas, TensorBoard,
                  tuner trials' gradients, clearing a session
  layers.py       BatchNormalization through TensorFlow's fused kernel on Keras 3
  checkpoints.py  which Keras wrote a checkpoint, where the global step is
  tflite.py       the TensorFlow Lite interpreter; a Keras model called with constant weights
  xla.py          XLA-compiled functions on the current stack, plain ops on the legacy one
  private.py      every private TensorFlow, Keras or keras-tuner symbol audioclf touches,
                  each listed with why and tested by name (tests/test_compat.py)
"""

import keras  # noqa: F401  The Keras of this stack: `from audioclf.compat import keras`.

from audioclf.compat.checkpoints import STEP_KEYS, checkpoint_keras_major  # noqa: F401
from audioclf.compat.layers import BatchNormalization  # noqa: F401
from audioclf.compat.stack import (  # noqa: F401
    CURRENT_STACK, ESTIMATOR, HOW_TO_GET, KERAS3, LEGACY_STACK, STACK, TF_VERSION, StackError,
    require_estimator, stack_record)
from audioclf.compat.tflite import constant_call, tflite_interpreter  # noqa: F401
from audioclf.compat.training import (  # noqa: F401
    TensorBoard, build_optimizer, clear_session, fit_under, forget_trial_gradients,
    is_legacy_optimizer, learning_phase, optimizers, trial_gradient_names)
