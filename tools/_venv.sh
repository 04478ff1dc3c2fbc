# Sourced by tools/demo.sh and tools/test.sh: create or reuse .venv and install audioclf into it.
# Reinstalls only when pyproject.toml changed (a stamp holds its hash), so a second call is instant.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AUDIOCLF_VENV:-$ROOT/.venv}"
EXTRAS="${AUDIOCLF_EXTRAS:-test,demo,bench}"

find_python() {
  # TF 2.15 (the last release with tf.estimator) has wheels for CPython 3.9-3.11 only; we pin 3.11.
  for cand in "${AUDIOCLF_PYTHON:-}" python3.11 python3 python; do
    [ -n "$cand" ] || continue
    command -v "$cand" >/dev/null 2>&1 || continue
    if "$cand" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  if ! PY="$(find_python)"; then
    found="$(command -v python3 >/dev/null 2>&1 && python3 -c 'import sys; print(sys.version.split()[0])' || echo none)"
    echo "audioclf needs Python 3.11 (TensorFlow 2.15, the last release with tf.estimator, has no wheels for newer Pythons)." >&2
    echo "Found: python3 = $found. Install Python 3.11 or point AUDIOCLF_PYTHON at one." >&2
    exit 2
  fi
  echo "[audioclf] creating $VENV with $($PY -c 'import sys; print(sys.executable, sys.version.split()[0])')" >&2
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "audioclf: $VENV was made with an unsupported Python ($("$VENV/bin/python" -V)); remove it and rerun." >&2
  exit 2
fi

STAMP="$VENV/.audioclf-install"
WANT="$( (cat "$ROOT/pyproject.toml"; echo "$EXTRAS") | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  echo "[audioclf] installing audioclf[$EXTRAS] into $VENV (first run takes a minute)" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[$EXTRAS]" >&2
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# Quiet TF's C++ start-up chatter (CUDA probes, CPU feature notes); errors still print.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
PYTHON="$VENV/bin/python"
