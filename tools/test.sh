#!/usr/bin/env bash
# Runs the audioclf test suite on every stack this machine has a Python for (see tools/_venv.sh):
# the current stack in .venv, the legacy stack in .venv-legacy, each created and installed on first use.
#   tools/test.sh                        # everything, slow end-to-end checks included (what CI runs)
#   tools/test.sh -m "not slow"          # the fast part while editing
#   AUDIOCLF_STACK=legacy tools/test.sh  # one stack only (current, legacy or both)
#   AUDIOCLF_TEST_WORKERS=1 tools/test.sh  # one process (default: one per core, pytest-xdist)
# Extra arguments go to pytest. Each stack's run lists what it skipped and why (pytest -rs: the
# tests only the other stack can run); the exit status is non-zero if any stack failed.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"

declare -A STATUS
failed=0
# A test file runs whole in one worker (--dist loadfile): its module fixtures are made once. The
# files go out in the order tests/conftest.py gives them, longest first (--no-loadscope-reorder).
WORKERS=${AUDIOCLF_TEST_WORKERS:-$(nproc)}
PARALLEL=()
[ "$WORKERS" -gt 1 ] && PARALLEL=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)
# Every stack's venv before any test: a test may run the other stack's commands (the legacy
# stack's report in tests/test_migrate.py, docs/your_model.md's blocks in tests/test_docs.py).
# The stacks this run tests: a check marked `once` (tests/conftest.py) runs on the current stack
# alone where that stack is among them.
TESTED=()
for stack in "${STACKS[@]}"; do
  STATUS[$stack]=0
  use_stack "$stack" || STATUS[$stack]=$?
  [ "${STATUS[$stack]}" != 0 ] || TESTED+=("$stack")
done
export AUDIOCLF_TESTED_STACKS="${TESTED[*]}"
for stack in "${STACKS[@]}"; do
  echo "[audioclf] === tests on the $stack stack ===" >&2
  rc=${STATUS[$stack]}
  [ "$rc" = 0 ] && { use_stack "$stack" || rc=$?; }
  if [ "$rc" = 0 ]; then
    # The versions from the packages' metadata: importing TensorFlow here cost 3-5 s per stack.
    "$PYTHON" -c 'import sys
from importlib import metadata
owners = metadata.packages_distributions()
tf, keras = (metadata.version(owners[name][0]) for name in ("tensorflow", "keras"))
print(f"[audioclf] {sys.argv[1]} stack: Python {sys.version.split()[0]}, TensorFlow {tf}, "
      f"Keras {keras} ({sys.prefix})")' "$stack" >&2
    "$PYTHON" -m pytest -q -rs "${PARALLEL[@]+"${PARALLEL[@]}"}" "$@" || rc=$?
  fi
  STATUS[$stack]=$rc
  [ "$rc" = 0 ] || failed=1
done

echo "[audioclf] === summary ===" >&2
for stack in "${STACKS[@]}"; do
  if [ "${STATUS[$stack]}" = 0 ]; then
    echo "[audioclf] $stack stack: passed" >&2
  else
    echo "[audioclf] $stack stack: FAILED (exit ${STATUS[$stack]})" >&2
  fi
done
print_skipped
exit "$failed"
