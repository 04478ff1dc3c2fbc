#!/usr/bin/env bash
# The main job on the built-in demo data: generate spoken words, fill the cache, then train the same
# model on every stack this machine has a Python for (see tools/_venv.sh) and compare side by side:
#   current stack (.venv: Keras 3, TensorFlow >= 2.20)   --engine=keras
#   legacy stack (.venv-legacy: Keras 2, TensorFlow 2.15)  --engine=keras and --engine=estimator
#   tools/demo.sh                    # a few minutes on 2 CPU cores
#   tools/demo.sh --train_steps=50   # extra flags go to every training run
#   AUDIOCLF_STACK=legacy tools/demo.sh   # one stack only (current, legacy or both)
# On the newest stack it also trains the pretrained preset (flags/pretrained_speech.flags: Google's
# speech embedding, its last blocks fine-tuned, and a small head) into runs/demo/<stack>/pretrained.
# Each run is also evaluated on voices it never heard, beyond the training speakers' rate and pitch
# (data/speech_words/_held_out, audioclf synthesize --held_out_speakers): the table shows both
# accuracies, and the weakest unseen speaker's, a column per run.
# With both stacks it then tells the migration story: the legacy Estimator model migrated to Keras 3
# (python -m audioclf migrate --report), evaluated, trained MIGRATE_MORE_STEPS more on the current
# stack, and shown beside the Keras-3-from-scratch run (tools/migration_story.py).
# Outputs: data/speech_words (dataset), runs/demo/<stack>/<engine or pretrained> (checkpoints,
# TensorBoard logs, labels.txt, params.json, metrics.json, eval_held_out/), runs/demo/<stack>-<run>.json,
# runs/demo/current/migrated, and tables at the end.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"

stack_engines() {  # The engines each stack trains in the demo.
  case "$1" in
    current) echo "keras" ;;
    legacy) echo "keras estimator" ;;
  esac
}

run_demo() {  # run_demo STACK NAME FLAGS...: trains runs/demo/STACK/NAME, evaluates it on unseen voices.
  local stack="$1" name="$2"
  shift 2
  echo "[demo] $stack stack: training $name" >&2
  "$PYTHON" -m audioclf train "$@" --model_dir="runs/demo/$stack/$name" \
    | tee "runs/demo/$stack-$name.log" | tail -n 1 > "runs/demo/$stack-$name.json"
  echo "[demo] $stack stack, $name: evaluating on the held-out voices" >&2
  "$PYTHON" -m audioclf evaluate --model_dir="runs/demo/$stack/$name" --split=test \
    --data_dir=data/speech_words/_held_out --group_by=speaker \
    --report_dir="runs/demo/$stack/$name/eval_held_out" | tail -n 1 \
    > "runs/demo/$stack-$name-held-out.json"
  RUNS+=("$stack-$name")
}

mkdir -p runs/demo
RUNS=()
for stack in "${STACKS[@]}"; do
  use_stack "$stack"
  if [ "${#RUNS[@]}" = 0 ]; then  # Once, with the first stack's Python.
    "$PYTHON" -m audioclf synthesize --out=data/speech_words --per_word=150 --seed=0 \
      --background_noise --held_out_speakers=10
  fi
  echo "[demo] $stack stack: filling the clip cache (a later run reads it and decodes nothing)" >&2
  "$PYTHON" -m audioclf cache --flagfile=flags/demo.flags | tail -n 1 \
    | tee "runs/demo/$stack-cache.json" >&2
  for engine in $(stack_engines "$stack"); do
    run_demo "$stack" "$engine" --flagfile=flags/demo.flags --engine="$engine" "$@"
  done
  if [ "$stack" = "${STACKS[0]}" ]; then  # Once, on the newest stack: beside the CNN from scratch.
    run_demo "$stack" pretrained --preset=pretrained_speech "$@"
  fi
done

"$PYTHON" - "${RUNS[@]}" <<'PY'
import json, sys
rows = {run: json.load(open(f"runs/demo/{run}.json")) for run in sys.argv[1:]}
for run, row in rows.items():  # Unseen voices: accuracy, and the weakest speaker's (report.json).
  held_out = json.load(open(f"runs/demo/{run}-held-out.json"))
  groups = json.load(open(f"{held_out['report_dir']}/report.json"))["groups"]["rows"]
  row.update(held_out_accuracy=held_out["accuracy"], held_out_weakest=groups[0]["accuracy"])
keys = ["steps", "val_accuracy", "test_accuracy", "held_out_accuracy", "held_out_weakest",
        "examples_per_sec", "input_stall_fraction", "wall_seconds"]
keys = [k for k in keys if any(k in r for r in rows.values())]
width = max(18, *(len(run) + 2 for run in rows))
print(f"{'':22s}" + "".join(f"{run:>{width}s}" for run in rows))
for k in keys:
  cells = [r.get(k) for r in rows.values()]
  print(f"{k:22s}" + "".join(f"{c:{width}.4g}" if isinstance(c, (int, float)) else f"{str(c):>{width}s}"
                             for c in cells))
print("test: new speakers of the training voices' range; held_out: voices beyond it "
      "(data/speech_words/_held_out)")
print(json.dumps({"demo": rows}))
PY

# The migration story needs the Estimator's model (legacy stack) and Keras 3 (current stack).
if [[ " ${STACKS[*]} " == *" legacy "* && " ${STACKS[*]} " == *" current "* ]]; then
  use_stack legacy
  LEGACY_PYTHON="$PYTHON"
  use_stack current
  echo "[demo] migrating the Estimator's model_dir to Keras 3, with a parity report" >&2
  rm -rf runs/demo/current/migrated  # The demo's own: migrate writes only into a new folder.
  "$PYTHON" -m audioclf migrate --from_model_dir=runs/demo/legacy/estimator \
    --to_model_dir=runs/demo/current/migrated --report --split=test \
    --legacy_python="$LEGACY_PYTHON" | tee runs/demo/migrate.log | tail -n 1 > runs/demo/migrate.json
  grep -v '^{' runs/demo/migrate.log  # The report's table: per-class accuracy before and after.
  "$PYTHON" -m audioclf evaluate --model_dir=runs/demo/current/migrated --split=test \
    | tail -n 1 > runs/demo/migrated-evaluate.json
  steps="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["steps"])' \
    runs/demo/migrate.json)"
  echo "[demo] current stack: training the migrated model ${MIGRATE_MORE_STEPS:-200} steps more" >&2
  "$PYTHON" -m audioclf train --flagfile=flags/demo.flags --model_dir=runs/demo/current/migrated \
    "$@" --train_steps=$((steps + ${MIGRATE_MORE_STEPS:-200})) | tee runs/demo/current-migrated.log \
    | tail -n 1 > runs/demo/current-migrated.json
  "$PYTHON" tools/migration_story.py runs/demo
else
  STACKS_SKIPPED+=("the migration story (Estimator on the legacy stack, migrated to Keras 3 and trained on): it needs both stacks")
fi
print_skipped
