#!/usr/bin/env bash
# Runs the audioclf test suite in .venv (created and installed on first use).
#   tools/test.sh              # everything, slow end-to-end checks included (what CI runs)
#   tools/test.sh -m "not slow" # the fast part while editing
# Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"
exec "$PYTHON" -m pytest -q "$@"
