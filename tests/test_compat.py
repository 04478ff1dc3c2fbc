"""compat: every private symbol audioclf touches is where audioclf expects it, named when it moves."""

import pytest

from audioclf import compat
from audioclf.compat import private


@pytest.mark.parametrize("symbol", private.SYMBOLS, ids=lambda s: f"{s.module}.{s.name}")
def test_each_private_symbol_is_there_on_the_stacks_it_is_used(symbol):
  if compat.STACK not in symbol.stacks:
    pytest.skip(f"used on the {' and '.join(symbol.stacks)} stack only")
  try:
    private.resolve(symbol)
  except (ImportError, AttributeError, KeyError) as e:
    pytest.fail(f"{symbol.module}.{symbol.name} is gone from this stack's release ({e}): "
                f"audioclf uses it to {symbol.why}; see audioclf/compat/private.py")


def test_no_private_symbol_is_used_outside_compat():
  import os  # pylint: disable=g-import-not-at-top
  import re  # pylint: disable=g-import-not-at-top
  root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "audioclf")
  offenders = []
  for folder, _, files in os.walk(root):
    if os.path.relpath(folder, root).startswith("compat"):
      continue
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        with open(path) as f:
          for number, line in enumerate(f, 1):
            if re.search(r"protected-access|tensorflow\.python\.|keras\.src\.", line):
              offenders.append(f"{os.path.relpath(path, root)}:{number}: {line.strip()}")
  assert not offenders, "\n".join(offenders)
