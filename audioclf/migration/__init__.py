"""Migration: a model_dir the legacy stack wrote, as one the current stack (Keras 3) trains on.

  python -m audioclf migrate --from_model_dir=runs/old --to_model_dir=runs/old-keras3 [--report]

Turns a model_dir the legacy stack wrote (TensorFlow 2.15, Keras 2; either
engine) into one the current stack (Keras 3) trains, evaluates, predicts and
exports from, and prints one line of JSON saying what it carried.

It runs on the current stack alone: the legacy checkpoint is read with
`tf.train.load_checkpoint`, which needs no Keras 2. Both legacy engines save a
checkpoint rooted at the Keras model, keyed `layer_with_weights-<i>/<weight>`;
the i-th layer of the same model built with Keras 3 that has weights gets
layer i's values (Keras 3 keys its own checkpoints by other names, so the
values are assigned, then saved the way the Keras engine saves them). Also
carried: the step, labels.txt, params.json (engine "keras", the new stack
recorded, and a "migration" record), and the optimizer's state, so training
resumes where it stopped instead of restarting Adam's or RMSprop's averages:

  legacy checkpoint                             Keras 3 optimizer
  Estimator (Keras 2 legacy optimizer):
    <weight>/.OPTIMIZER_SLOT/optimizer/m, v      momentum, velocity     (Adam)
    <weight>/.OPTIMIZER_SLOT/optimizer/rms       velocity               (RMSprop)
    estimator_global_step                        iterations
  Keras fit (Keras 2 optimizer):
    optimizer/_variables/<n>, in the order the   momentum, velocity (Adam: per weight, m then v);
    optimizer built them over the trainable      velocity (RMSprop: one per weight)
    weights
    optimizer/_iterations                        iterations

SGD has no state but its step. The learning rate (and a cosine schedule, a
function of the step) comes from params.json, as on any resume. State that
does not map (another optimizer's slots, a slot count that does not fit) is
left fresh, and the output and the record say so.

--report compares the legacy model with the migrated one on the same held-out
clips: per-class accuracy of each, and the largest difference between their
probabilities. The legacy model's probabilities must come from the legacy
stack, which this process is not, so they come from a file
`python -m audioclf predict --save_probabilities=` wrote there
(--legacy_probabilities=), or from a legacy Python this command runs for that
(--legacy_python=, default $AUDIOCLF_LEGACY_PYTHON, else the checkout's
.venv-legacy). The clips are then the --split of the model's data (the file's
own clips when one is given); their true labels come from the data's manifest.

  checkpoint.py  what a legacy checkpoint holds, read without Keras 2
  weights.py     its layers' values given to the same model built with Keras 3
  optimizer.py   the optimizer's step and slots
  migrate.py     migrate(): the new model_dir, written whole or not at all
  parity.py      --report: both models on the same held-out clips
"""
