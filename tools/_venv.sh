# Sourced by tools/demo.sh and tools/test.sh: which of audioclf's two stacks to run, and a venv for each.
#
#   current  the newest supported Python (3.13, else 3.12): TensorFlow >= 2.20, Keras 3, in .venv
#   legacy   Python 3.11: TensorFlow 2.15, Keras 2, tf.estimator, in .venv-legacy
#
# Both run where their Python exists (found on PATH, or through pyenv when it is installed).
# Settings (environment):
#   AUDIOCLF_STACK=current|legacy|both   force the stacks (default: every one whose Python exists)
#   AUDIOCLF_PYTHON, AUDIOCLF_PYTHON_LEGACY  the interpreter of each stack ("none": as if absent)
#   AUDIOCLF_VENV, AUDIOCLF_VENV_LEGACY      the venv folder of each (default .venv, .venv-legacy)
#   AUDIOCLF_EXTRAS                          pip extras to install (default test,demo,bench)
# After sourcing: STACKS (the stacks to run, newest first), STACKS_SKIPPED (one line per stack
# left out, with why), and `use_stack STACK`, which creates or reuses that stack's venv, installs
# audioclf into it when pyproject.toml changed (a stamp holds its hash), and sets PYTHON.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRAS="${AUDIOCLF_EXTRAS:-test,demo,bench}"
# Quiet TF's C++ start-up chatter (CUDA probes, CPU feature notes); errors still print.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

stack_versions() {  # The Python minor versions a stack runs on, preferred first.
  case "$1" in
    current) echo "3.13 3.12" ;;
    legacy) echo "3.11" ;;
  esac
}

or_list() {  # or_list "3.13 3.12" -> "3.13 or 3.12"
  echo "$1" | sed 's/ / or /g'
}

stack_venv() {
  case "$1" in
    current) echo "${AUDIOCLF_VENV:-$ROOT/.venv}" ;;
    legacy) echo "${AUDIOCLF_VENV_LEGACY:-$ROOT/.venv-legacy}" ;;
  esac
}

stack_python() {  # The interpreter the environment names for a stack, if any.
  case "$1" in
    current) echo "${AUDIOCLF_PYTHON:-}" ;;
    legacy) echo "${AUDIOCLF_PYTHON_LEGACY:-}" ;;
  esac
}

python_is() {  # python_is INTERPRETER "3.13 3.12": it runs, and is one of those versions.
  local v
  v="$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || return 1
  case " $2 " in *" $v "*) return 0 ;; esac
  return 1
}

find_python() {  # find_python STACK: prints an interpreter for STACK, or fails.
  local stack="$1" override versions v cand
  override="$(stack_python "$stack")"
  versions="$(stack_versions "$stack")"
  if [ -n "$override" ]; then
    [ "$override" = none ] && return 1
    python_is "$override" "$versions" && { echo "$override"; return 0; }
    echo "audioclf: $override is not Python $(or_list "$versions"), which the $stack stack needs" >&2
    return 1
  fi
  for v in $versions; do
    # On PATH (a pyenv shim of a version that is not active fails python_is), then in pyenv.
    for cand in "python$v" $(pyenv_pythons "$v"); do
      if command -v "$cand" >/dev/null 2>&1 && python_is "$cand" "$v"; then
        echo "$cand"; return 0
      fi
    done
  done
  return 1
}

pyenv_pythons() {  # pyenv_pythons 3.13: pyenv's CPython 3.13.x interpreters, newest first.
  command -v pyenv >/dev/null 2>&1 || return 0
  local root v
  root="$(pyenv root 2>/dev/null)" || return 0
  for v in $(pyenv versions --bare 2>/dev/null | grep -E "^${1//./\\.}\.[0-9]+$" | sort -t. -k3,3nr); do
    [ -x "$root/versions/$v/bin/python$1" ] && echo "$root/versions/$v/bin/python$1"
  done
  return 0
}

STACKS=()
STACKS_SKIPPED=()
case "${AUDIOCLF_STACK:-}" in
  "") wanted="current legacy"; forced=0 ;;
  both) wanted="current legacy"; forced=1 ;;
  current|legacy) wanted="$AUDIOCLF_STACK"; forced=1 ;;
  *) echo "audioclf: AUDIOCLF_STACK must be current, legacy or both, not '$AUDIOCLF_STACK'" >&2; exit 2 ;;
esac
for stack in current legacy; do
  case " $wanted " in
    *" $stack "*) ;;
    *) STACKS_SKIPPED+=("$stack stack: not run (AUDIOCLF_STACK=$AUDIOCLF_STACK)"); continue ;;
  esac
  # A venv made earlier is used as it is, even when its Python is no longer on PATH; "none"
  # leaves the stack out all the same.
  if [ "$(stack_python "$stack")" != none ] \
      && { [ -x "$(stack_venv "$stack")/bin/python" ] || find_python "$stack" >/dev/null; }; then
    STACKS+=("$stack")
  else
    if [ "$(stack_python "$stack")" = none ]; then
      var="$([ "$stack" = legacy ] && echo AUDIOCLF_PYTHON_LEGACY || echo AUDIOCLF_PYTHON)"
      why="$stack stack: left out ($var=none)"
    else
      why="$stack stack: no Python $(or_list "$(stack_versions "$stack")") found (on PATH or in pyenv)"
    fi
    if [ "$stack" = legacy ]; then
      why="$why, so nothing runs tf.estimator or Keras 2 (the Estimator engine and its tests)"
    else
      why="$why, so nothing runs Keras 3 on TensorFlow >= 2.20"
    fi
    if [ "$forced" = 1 ]; then
      echo "audioclf: AUDIOCLF_STACK=$AUDIOCLF_STACK, but the $why. Install it, or point" \
           "$([ "$stack" = legacy ] && echo AUDIOCLF_PYTHON_LEGACY || echo AUDIOCLF_PYTHON) at one." >&2
      exit 2
    fi
    STACKS_SKIPPED+=("$why")
  fi
done
if [ "${#STACKS[@]}" = 0 ]; then
  found="$(command -v python3 >/dev/null 2>&1 && python3 -c 'import sys; print(sys.version.split()[0])' || echo none)"
  echo "audioclf needs Python 3.12 or 3.13 (TensorFlow >= 2.20, Keras 3), or Python 3.11 (TensorFlow" \
       "2.15 with tf.estimator). Found: python3 = $found. Install one, or point AUDIOCLF_PYTHON at it." >&2
  exit 2
fi

use_stack() {  # use_stack STACK: its venv, created or reused and up to date; sets VENV and PYTHON.
  local stack="$1" py want stamp versions
  VENV="$(stack_venv "$stack")"
  versions="$(stack_versions "$stack")"
  if [ ! -x "$VENV/bin/python" ]; then
    if ! py="$(find_python "$stack")"; then
      echo "audioclf: no Python $(or_list "$versions") for the $stack stack" >&2
      return 2
    fi
    echo "[audioclf] creating $VENV ($stack stack) with $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])')" >&2
    "$py" -m venv "$VENV"
  fi
  if ! python_is "$VENV/bin/python" "$versions"; then
    echo "audioclf: $VENV is the $stack stack's venv, but holds $("$VENV/bin/python" -V 2>&1) (it needs" \
         "Python $(or_list "$versions"); an older audioclf kept its Python 3.11 venv there). Remove it and rerun." >&2
    return 2
  fi
  stamp="$VENV/.audioclf-install"
  want="$( (cat "$ROOT/pyproject.toml"; echo "$EXTRAS") | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "[audioclf] installing audioclf[$EXTRAS] into $VENV (first run takes a minute or two)" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
    # pyproject's build requirements too: a build without isolation (the wheel test) uses the venv's.
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check $(build_requires "$VENV") >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[$EXTRAS]" >&2
    echo "$want" > "$stamp"
  fi
  PYTHON="$VENV/bin/python"
}

build_requires() {  # pyproject.toml's [build-system] requires, as pip arguments.
  "$1/bin/python" -c 'import sys, tomllib; print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$ROOT/pyproject.toml"
}

print_skipped() {  # What is left out on this machine, and why; nothing when every stack runs.
  local line
  for line in "${STACKS_SKIPPED[@]+"${STACKS_SKIPPED[@]}"}"; do
    echo "[audioclf] skipped: $line" >&2
  done
}
