"""The model: its front end, its builders, and what a training run leaves in model_dir.

  features.py   the log-mel front end and SpecAugment, as Keras layers (raw audio in)
  build.py      build_model, compile_model: the one model of every engine, the tuner and export
  losses.py     the loss and accuracy: class ids or soft labels, label smoothing, class weights
  model_dir.py  labels.txt, params.json, checkpoints: writing them, checking them, loading a model
  cost.py       what a model costs: trainable parameters, multiply-adds a clip
  best.py       best/: the best evaluation's checkpoint (--keep_best) and early stopping's count
"""
