#!/usr/bin/env bash
# The main job on the built-in demo data: generate spoken words, fill the cache, then train the
# same model with both engines (tf.estimator via model_to_estimator, and Keras fit) and compare.
#   tools/demo.sh                 # a few minutes on 2 CPU cores
#   tools/demo.sh --train_steps=50   # extra flags go to both training runs
# Outputs: data/speech_words (dataset), runs/demo/{keras,estimator} (checkpoints, TensorBoard
# logs, labels.txt, params.json, metrics.json), and a side-by-side table at the end.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"

"$PYTHON" tools/make_speech_words.py --out_dir data/speech_words --per_word 150 --seed 0

echo "[demo] filling the clip cache (a second run of the demo reads it and decodes nothing)" >&2
mkdir -p runs/demo
"$PYTHON" -m audioclf.cache --flagfile=flags/demo.flags | tail -n 1 | tee runs/demo/cache.json >&2

for engine in keras estimator; do
  echo "[demo] training with --engine=$engine" >&2
  "$PYTHON" -m audioclf.train --flagfile=flags/demo.flags --engine="$engine" \
    --model_dir="runs/demo/$engine" "$@" | tee "runs/demo/$engine.log" | tail -n 1 \
    > "runs/demo/$engine.json"
done

"$PYTHON" - <<'PY'
import json
rows = {e: json.load(open(f"runs/demo/{e}.json")) for e in ("keras", "estimator")}
keys = ["steps", "val_accuracy", "test_accuracy", "examples_per_sec", "input_stall_fraction",
        "wall_seconds"]
keys = [k for k in keys if any(k in r for r in rows.values())]
print(f"{'':22s}" + "".join(f"{e:>12s}" for e in rows))
for k in keys:
  cells = [r.get(k) for r in rows.values()]
  print(f"{k:22s}" + "".join(f"{c:12.4g}" if isinstance(c, (int, float)) else f"{str(c):>12s}"
                             for c in cells))
print(json.dumps({"demo": rows}))
PY
