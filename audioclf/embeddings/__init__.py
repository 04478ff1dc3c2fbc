"""Embed once: a frozen front end's output for every clip and augmented view, cached, and a head trained on it.

  boundary.py  where a model's frozen front end ends: the model that embeds, the head view that trains
  views.py     view k of row i: its window and augmentations, pure functions of (seed, i, k)
  table.py     the embedding split: its key, its cold pass, written and checked as a clip split is
  batches.py   training batches of cached embeddings: the sampler's rows, a drawn view each
  fit.py       the cut and table both engines train from (or, in one line, why not); what Keras fits
  estimator.py the Estimator engine's: model_to_estimator's, its training step the head view's
"""
