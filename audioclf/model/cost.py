"""What a model costs: trainable parameters and multiply-adds a clip, counted as the papers count.

tools/bench_models.py reports both for each built-in model; tests/test_zoo.py
checks them against the published figures.
"""

from __future__ import annotations

import math


def parameters(model) -> int:
  """Trainable weights only: what the papers count (batch norm's moving statistics are buffers)."""
  return sum(math.prod(w.shape) for w in model.trainable_weights)


def macs(model) -> int:
  """Multiply-adds of one example through the model's conv and dense layers.

  Each kernel weight (a conv's, a depthwise or pointwise kernel, a Dense
  matrix) is used once per output position, so a layer costs its kernels'
  sizes times its output's spatial size; bias, batch norm and activations are
  left out (batch norm folds into the conv before it at inference).
  """
  total = 0
  for layer in model.layers:
    kernels = [w for w in layer.weights if "kernel" in w.name]
    if kernels:
      positions = math.prod(layer.output.shape[1:-1])
      total += positions * sum(math.prod(w.shape) for w in kernels)
  return total
