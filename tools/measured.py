"""Where the benchmarks write what they measured: docs/measured/<bench>.md, with when, where and how.

  import measured
  measured.write("bench_models", "Built-in models", measured.command(), table_markdown, results)

Every benchmark writes its page with --measured. AUDIOCLF_MEASURED_DIR, where
set, names another folder to write to (smoke runs and tests use it, so they
leave docs/measured alone).

Every figure the docs quote comes from a file here, written by the tool that
measured it, headed by the date, the machine (CPU model, cores, memory), the
load average while it ran, the stacks' versions and the exact command; the
results go beside it as JSON for other tools. No figure is copied by hand.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "docs", "measured")
DIR_ENV = "AUDIOCLF_MEASURED_DIR"  # Another folder for the pages: smoke runs and tests.


def directory() -> str:
  """Where the pages go: $AUDIOCLF_MEASURED_DIR where set, else docs/measured."""
  return os.environ.get(DIR_ENV) or DIR


def command(argv: Optional[list[str]] = None) -> str:
  """The command line of this run as a user types it again from the repository root.

  Args:
    argv: the arguments, the script's path first (default: sys.argv).
  """
  argv = sys.argv if argv is None else argv
  script = os.path.relpath(os.path.abspath(argv[0]), ROOT)
  return " ".join(["python", script, *argv[1:]])


def machine() -> str:
  """This machine in a line: CPU model, cores, memory, OS."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                 cpu)
  except OSError:
    pass
  memory = ""
  try:
    memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
  except (ValueError, OSError):
    pass
  return f"{cpu}, {os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}"


def load() -> str:
  """The load average over 1, 5 and 15 minutes, in a line ("unknown" where there is none)."""
  try:
    one, five, fifteen = os.getloadavg()
  except OSError:
    return "unknown"
  return f"{one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min)"


def write(name: str, title: str, command: str, body: str,
          results: Optional[dict[str, Any]] = None, load_before: Optional[str] = None) -> str:
  """Writes <name>.md (and <name>.json with `results`) in directory(); returns the .md path.

  Args:
    name: the file's name, the benchmark's.
    title: the page's heading.
    command: the command line that measured it, as a user runs it again.
    body: the tables and notes, markdown.
    results: the figures as data, for other tools.
    load_before: the load average when the run started (load() then).
  """
  folder = directory()
  os.makedirs(folder, exist_ok=True)
  now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  header = [f"# {title}", "",
            f"Measured {now} by `{command}`", "",
            f"- machine: {machine()}",
            f"- load average: {load_before + ' at the start, ' if load_before else ''}"
            f"{load()} at the end",
            f"- Python {sys.version.split()[0]}", ""]
  path = os.path.join(folder, f"{name}.md")
  with open(path, "w") as f:
    f.write("\n".join(header) + body.rstrip("\n") + "\n")
  if results is not None:
    with open(os.path.join(folder, f"{name}.json"), "w") as f:
      json.dump({"measured": now, "machine": machine(), "command": command, **results}, f,
                indent=2, sort_keys=True)
      f.write("\n")
  return path
