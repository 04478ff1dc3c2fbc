"""Migration: a model_dir the legacy stack wrote, or a team's own Estimator, on Keras 3.

  python -m audioclf migrate --from_model_dir=runs/old --to_model_dir=runs/old-keras3 [--report]
  python -m audioclf migrate --from_model_dir=<their estimator dir> --model=<their builder> \\
      --to_model_dir=runs/theirs-keras3 [--mapping=map.json] [--data_dir=...] [--report]

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

An Estimator audioclf never built, one a team's own code made with
`model_to_estimator(their_keras_model)` (`--model` names the builder that
returns that model, compiled), goes the same road (foreign.py): the builder
builds it on Keras 3, the layers are paired by order or by a mapping file
(printed side by side where they do not line up), the step and the slots go
into the builder's own optimizer (Adam's m, v; RMSprop's rms, its epsilon
squared where Keras 2 added it outside the square root; SGD's momentum), and
the result is a `model.keras` that plain Keras loads, plus, for a model of
one raw-audio input, a model_dir audioclf trains on.

An Estimator of no Keras model (a model_fn of tf.compat.v1.layers or
get_variable's, or a canned DNN, Linear or DNNLinearCombined classifier)
saves a name-based checkpoint (`dense/kernel`, `dnn/hiddenlayer_0/kernel`,
`<var>/Adam`, `global_step`): named.py carries it into the team's Keras 3
rewrite (--model) or the Keras 3 model audioclf builds from a canned
classifier's constructor arguments (--estimator), each variable to one
weight by kind and order or by a mapping, refusing anything ambiguous with
both sides shown; the step and the TF1 optimizer's slots go into the Keras 3
optimizer. --estimator also names what --report runs on the legacy stack.
docs/migration.md has the commands.

  checkpoint.py      what a legacy checkpoint holds, read without Keras 2
  alignment.py       which Keras 3 layer gets which layer_with_weights-<i>; the mismatch table
  weights.py         the layers' values given to the model built with Keras 3
  optimizer.py       the optimizer's step and slots (and a builder's optimizer's arguments)
  migrate.py         migrate(): audioclf's own model_dir, written whole or not at all
  foreign.py         migrate_estimator(): a team's Estimator, by its builder
  team.py            what both roads of a team's Estimator share: builder, folders, writing
  names.py           what a name-based checkpoint holds: variables, slots, step
  name_mapping.py    which Keras 3 weight gets which checkpoint variable; the mismatch table
  named_optimizer.py the step and TF1 (or in-graph Keras 2) slots into Keras 3's optimizer
  canned.py          a canned classifier's Keras 3 model, from its constructor arguments
  named.py           migrate_named(): an Estimator of no Keras model
  parity.py          --report: both models on the same held-out clips or inputs
  legacy_predict.py  a team's Estimator's own probabilities (runs on the legacy stack)
  legacy_estimator.py  the team's --estimator there: its probabilities, a canned one's arguments
"""
