"""Runs every command of the README and docs/ as written: each must end with exit status 0.

  tools/demo.sh && python tools/check_docs.py          # after the demo, as the docs assume
  python tools/check_docs.py --dry_run                 # list the commands it would run
  python tools/check_docs.py --pages=docs/your_model.md --stacks=current
  python tools/check_docs.py --pages=docs/your_model.md --root=<a folder laid out like this one>
  python tools/check_docs.py --outputs=outputs.jsonl   # each command's standard output kept

A command is a line of a ```sh block (a `\\` ends a line that goes on), its
`# comment` dropped. `export NAME=value` lines set the environment of the
block's later commands; a block whose first line is `# legacy stack` runs on
the legacy stack's venv only, the rest on every stack present (as if its venv
were active: `python` is the venv's). `tools/demo.sh` and `tools/test.sh`
themselves are not run again. A block that names a venv's interpreter
(`.venv/bin/python`, `.venv-legacy/bin/python`, as the docs write it for a
reader whose venv is not active) runs once, as written; one that says plain
`python` runs on each stack. Commands run from the repository root, one
after another (a later one may read what an earlier one wrote), each within
--timeout_s; the first failure stops the check with its output's end.
With --outputs, a JSON line per command that ran (page, stack, command and
its whole standard output) goes to that file: what a test asserts on
(tests/test_docs.py), without running the commands a second time.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from typing import Iterator, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENVS = {"current": ".venv", "legacy": ".venv-legacy"}
NOT_RUN = ("tools/demo.sh", "tools/test.sh")  # What the docs are checked after, and CI.
LEGACY_MARK = "# legacy stack"


def pages() -> list[str]:
  return [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]


def blocks(path: str) -> Iterator[list[str]]:
  """The lines of each ```sh block of a markdown file, continuation lines joined."""
  with open(path) as f:
    text = f.read()
  for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
    lines, current = [], ""
    for line in block.splitlines():
      # A whole-line comment is kept (it may mark the block); a trailing one goes.
      current += line.rstrip() if line.lstrip().startswith("#") else _drop_comment(line)
      if current.endswith("\\"):
        current = current[:-1] + " "
        continue
      lines.append(current.strip())
      current = ""
    yield [line for line in lines if line]


def commands(block: list[str]) -> Iterator[tuple[dict[str, str], str]]:
  """(environment additions, command) for each command line of a block."""
  env: dict[str, str] = {}
  for line in block:
    if line.startswith("#"):
      continue
    command = line
    if command.startswith("export "):
      name, _, value = command[len("export "):].partition("=")
      env[name] = value
    elif not any(command.startswith(skip) or f" {skip}" in command for skip in NOT_RUN):
      yield dict(env), command


def _drop_comment(line: str) -> str:
  """The line without its trailing `# comment`: a # after a blank, outside quotes."""
  quote = None
  for i, char in enumerate(line):
    if quote:
      quote = None if char == quote else quote
    elif char in "'\"":
      quote = char
    elif char == "#" and (i == 0 or line[i - 1].isspace()):
      return line[:i].rstrip()
  return line.rstrip()


def _stacks_of(block: list[str], present: list[str]) -> list[str]:
  """The stacks a block runs on: each named venv's once, else the marked one, else every one."""
  named = [stack for stack, venv in VENVS.items()
           if any(re.search(rf"(^|[\s=]){re.escape(venv)}/bin/", line) for line in block)]
  if named:  # Once: its commands name their interpreters. A named venv absent: skipped.
    return ([s for s in named if s not in present] or named)[:1]
  return ["legacy"] if block and block[0] == LEGACY_MARK else present


def run(command: str, env: dict[str, str], stack: str, timeout_s: float,
        root: str = ROOT) -> tuple[int, str, str, float]:
  """Runs `command` with bash in `root`, the stack's venv first on PATH.

  Returns:
    (status, the output's end, the whole standard output, seconds).
  """
  venv_bin = os.path.join(root, VENVS[stack], "bin")
  full_env = dict(os.environ, PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                  VIRTUAL_ENV=os.path.dirname(venv_bin), **env)
  start = time.monotonic()
  try:
    proc = subprocess.run(["bash", "-c", command], cwd=root, env=full_env, capture_output=True,
                          text=True, timeout=timeout_s)
  except subprocess.TimeoutExpired:
    return 124, f"timed out after {timeout_s:.0f} s", "", time.monotonic() - start
  return (proc.returncode, (proc.stdout + proc.stderr)[-3000:], proc.stdout,
          time.monotonic() - start)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--pages", nargs="*", help="Markdown files (default README.md, docs/*.md).")
  parser.add_argument("--stacks", default="current,legacy", help="Stacks to run on.")
  parser.add_argument("--timeout_s", type=float, default=1800)
  parser.add_argument("--dry_run", action="store_true")
  parser.add_argument("--root", default=ROOT, help="Where the commands run (default the "
                      "repository; tests/test_docs.py gives a copy laid out like it).")
  parser.add_argument("--outputs", help="A file for each command's standard output, a JSON "
                      "line each (page, stack, command, stdout).")
  args = parser.parse_args()
  stacks = [s for s in args.stacks.split(",")
            if os.access(os.path.join(args.root, VENVS[s], "bin", "python"), os.X_OK)]
  outputs = open(args.outputs, "w") if args.outputs else None  # pylint: disable=consider-using-with
  try:
    ran = check(args, stacks, outputs)
  finally:
    if outputs:
      outputs.close()
  if ran is None:
    return 1
  print(f"{ran} documented commands ran as written", flush=True)
  return 0


def check(args: argparse.Namespace, stacks: list[str], outputs) -> Optional[int]:
  """Runs (or with --dry_run lists) the pages' commands: how many ran, None at a failure."""
  ran = 0
  for page in args.pages or pages():
    page_name = os.path.relpath(page, ROOT)
    for block in blocks(page):
      block_stacks = _stacks_of(block, stacks)
      for env, command in commands(block):
        for stack in block_stacks:
          if stack not in stacks:
            print(f"skipped ({stack} stack absent): {command}", flush=True)
            continue
          where = f"{page_name} [{stack}]"
          if args.dry_run:
            print(f"{where}: {command}", flush=True)
            continue
          code, output, stdout, seconds = run(command, env, stack, args.timeout_s, args.root)
          if outputs:
            outputs.write(json.dumps({"page": page_name, "stack": stack,
                                      "command": command, "stdout": stdout}) + "\n")
          print(f"{'ok  ' if code == 0 else 'FAIL'} {seconds:6.1f} s  {where}: {command}",
                flush=True)
          if code != 0:
            print(output, flush=True)
            return None
          ran += 1
  return ran


if __name__ == "__main__":
  sys.exit(main())
