"""Runs a cluster's tasks as processes on this host: one per task, each with its TF_CONFIG.

`Cluster` starts one process per task of a TensorFlow cluster, each with the
TF_CONFIG that names its task, streams their output with a `[task:i]` prefix,
stops every task when one fails (or when this process is told to stop), and
shuts the parameter servers down once the others are done: ps tasks serve
until they are told to stop, so someone has to.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Optional, Sequence

from audioclf.distributed.cluster import chief_of, tasks_of, tf_config


class Cluster:
  """Runs `command` once per task of `cluster`, each process with its own TF_CONFIG.

  Args:
    cluster: the cluster spec, e.g. from `loopback_cluster`.
    command: the argv every task runs (the same on every task, as on real hosts).
    evaluator: also run an `evaluator` task (not part of the cluster spec).
    out, err: where the tasks' prefixed stdout and stderr lines go.
    stop_grace_s: how long a task may take to end after SIGTERM before SIGKILL.
  """

  def __init__(self, cluster: dict[str, list[str]], command: Sequence[str],
               evaluator: bool = False, out: IO[str] = sys.stdout, err: IO[str] = sys.stderr,
               stop_grace_s: float = 10.0):
    self.cluster = cluster
    self.command = list(command)
    self.tasks = tasks_of(cluster, evaluator)
    self.chief = chief_of(cluster)
    self._out, self._err = out, err
    self._grace = stop_grace_s
    self._lock = threading.Lock()  # One line at a time on out/err.
    self._procs: dict[tuple[str, int], subprocess.Popen] = {}
    self._threads: list[threading.Thread] = []
    self.last_lines: dict[tuple[str, int], str] = {}  # Each task's last stdout line.
    self._signal: Optional[int] = None  # A SIGINT or SIGTERM this process received.

  def _stream(self, task, pipe, sink):
    prefix = f"[{task[0]}:{task[1]}] "
    for line in iter(pipe.readline, ""):
      if sink is self._out and line.strip():
        self.last_lines[task] = line.rstrip("\n")
      with self._lock:
        sink.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
        sink.flush()
    pipe.close()

  def start(self) -> None:
    for task in self.tasks:
      env = dict(os.environ, TF_CONFIG=tf_config(self.cluster, task), PYTHONUNBUFFERED="1")
      proc = subprocess.Popen(self.command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              errors="replace", bufsize=1)
      self._procs[task] = proc
      for pipe, sink in ((proc.stdout, self._out), (proc.stderr, self._err)):
        thread = threading.Thread(target=self._stream, args=(task, pipe, sink), daemon=True)
        thread.start()
        self._threads.append(thread)

  def _log(self, message: str) -> None:
    with self._lock:
      self._err.write(f"[launch] {message}\n")
      self._err.flush()

  def stop(self, tasks: Optional[Sequence[tuple[str, int]]] = None) -> None:
    """SIGTERM to `tasks` (default: all) still running, SIGKILL to those that outlive the grace."""
    procs = [self._procs[t] for t in (tasks if tasks is not None else self.tasks)]
    for proc in procs:
      if proc.poll() is None:
        proc.terminate()
    deadline = time.monotonic() + self._grace
    for proc in procs:
      try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

  def wait(self, poll_s: float = 0.2) -> int:
    """Waits for the run to end and returns its exit code.

    The run ends when every task but the ps tasks has exited; the ps tasks
    are then stopped. When a task fails, every other task is stopped at once.

    Returns:
      The chief's exit code; where another task failed first (and the chief
      was stopped because of it), that task's code.
    """
    finite = [t for t in self.tasks if t[0] != "ps"]
    failed = []
    while True:
      if self._signal is not None:
        self._log(f"received signal {self._signal}; stopping every task")
        self.stop()
        return 128 + self._signal
      # A ps task never ends by itself while training runs: any exit is a failure.
      failed = [(t, self._procs[t].returncode) for t in self.tasks
                if self._procs[t].poll() is not None
                and (self._procs[t].returncode != 0 or t[0] == "ps")]
      if failed:
        task, code = failed[0]
        self._log(f"{task[0]}:{task[1]} exited with {code}; stopping the other tasks")
        self.stop()
        break
      if all(self._procs[t].poll() is not None for t in finite):
        break
      time.sleep(poll_s)
    ps = [t for t in self.tasks if t[0] == "ps" and self._procs[t].poll() is None]
    if ps:
      self._log("training is over; stopping the parameter servers")
      self.stop(ps)
    for thread in self._threads:
      thread.join(timeout=5)
    chief = self._procs[self.chief].returncode
    if failed and failed[0][0] != self.chief:
      return failed[0][1] if failed[0][1] > 0 else 1  # Killed or a ps that ended: still a failure.
    return chief if chief >= 0 else 128 - chief

  def run(self) -> int:
    """start, then wait; SIGINT or SIGTERM to this process stops every task first.

    Returns:
      wait's exit code, or 128 + the signal's number.
    """
    def on_signal(signum, frame):
      # Only a note: the handler may interrupt a Popen.poll that holds the
      # lock a wait here would need. wait's loop does the stopping.
      self._signal = signum

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
      self.start()
      return self.wait()
    finally:
      for s, handler in previous.items():
        signal.signal(s, handler)
      self.stop()
