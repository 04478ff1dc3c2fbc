"""`import audioclf`: light, and its command names callable whatever was imported first."""

import subprocess
import sys

import pytest

COMMANDS = ("train", "evaluate", "export", "tune", "migrate")


@pytest.mark.parametrize("first", ["module", "function"])
def test_command_names_are_callable_after_any_import_order(first):
  # A fresh interpreter: the import order is the point, and pytest's has imported everything.
  imports = {"module": "import audioclf.train, audioclf.evaluate, audioclf.export, "
                       "audioclf.tune, audioclf.migrate",
             "function": "from audioclf.train import train"}[first]
  code = (f"{imports}\nimport audioclf\n"
          f"print(all(callable(getattr(audioclf, n)) for n in {COMMANDS!r}))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert out.stdout.split() == ["True"]


def test_import_is_light():
  code = "import sys, audioclf; print('tensorflow' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.stdout.strip() == "False", out.stderr
