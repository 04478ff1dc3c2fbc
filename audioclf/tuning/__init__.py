"""Hyperparameter search with keras-tuner over training's own model builder and warm input_fn.

  python -m audioclf tune --flagfile=flags/tune.flags
  audioclf.tune(params)                                   # the same from Python

Each trial builds its model with `models.build_model`/`compile_model`, reads
`pipeline.input_fn` and trains in the Keras engine's loop
(`engines.keras_loop.fit`: stall meter, step clock, stop at the trial's
train_steps), exactly as `python -m audioclf train` does, with the trial's
hyperparameters put into `params`; each trial's record (the table, its
audioclf_trial.json) has its examples/s and input stall. The clips are
decoded into the persistent cache once, before the first trial; no trial
decodes audio, since the cache key depends on the sample rate and the files,
not on the batch size or the model.

What a search leaves in --tune_dir (a rerun with the same folder resumes it:
finished trials are kept, an interrupted one is run again, and a larger
--max_trials extends the search):

  search/               keras-tuner's project: oracle state, trial_<id>/ with
                        trial.json, the best epoch's weights, audioclf_trial.json
  tb/<trial id>/        TensorBoard logs of each trial, with the HParams dashboard
  best.flags            the best trial's Params as a flagfile for `audioclf train`
  best_model/           the best trial's model as a model_dir (labels.txt,
                        params.json, metrics.json, checkpoint): evaluate and export
                        read it as they read a trained one

  hypermodel.py  the search space: audioclf's builder and input_fn, hyperparameters in Params
  tuners.py      keras-tuner's tuners, with audioclf's per-trial clean-up and record
  trials.py      the trials of a search so far, read from its files, and their table
  search.py      tune(): the search, best.flags and best_model/
"""
