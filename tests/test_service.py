"""python -m audioclf.service: the dispatcher and a worker on loopback, started, filled, stopped."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

from audioclf import cli, cluster, manifest as manifest_lib, pipeline


class _Lines:
  """A process's stdout, line by line, with a deadline on each wait."""

  def __init__(self, proc):
    self.proc, self.seen, self._queue = proc, [], queue.Queue()
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for line in iter(self.proc.stdout.readline, ""):
      self._queue.put(line.rstrip("\n"))

  def wait_for(self, text, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
      try:
        line = self._queue.get(timeout=0.2)
      except queue.Empty:
        assert self.proc.poll() is None, (self.seen, self.proc.stderr.read()[-3000:])
        continue
      self.seen.append(line)
      if text in line:
        return line
    raise AssertionError(f"no {text!r} within {timeout} s: {self.seen}")


def _start(*args):
  proc = subprocess.Popen([sys.executable, "-m", "audioclf.service", *args, "--status_every_s=0.5"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  return _Lines(proc)


def _stop(lines):
  lines.proc.send_signal(signal.SIGTERM)
  lines.wait_for("stopped", timeout=60)
  assert lines.proc.wait(timeout=60) == 0


def test_worker_fills_its_cache_then_registers_and_both_stop_on_sigterm(tone_params, tmp_path):
  params = tone_params.replace(cache_dir=str(tmp_path / "cache"))
  flagfile = str(tmp_path / "data.flags")
  cli.to_flagfile(params, flagfile)
  port, worker_port = cluster.free_ports(2)
  dispatcher = _start("dispatcher", f"--port={port}")
  worker = None
  try:
    dispatcher.wait_for(f"listening at grpc://localhost:{port}")
    dispatcher.wait_for("0 workers")
    worker = _start("worker", f"--dispatcher=127.0.0.1:{port}", f"--port={worker_port}",
                    "--worker_host=127.0.0.1", f"--flagfile={flagfile}")
    worker.wait_for("cache ready")
    # Filled before it registered: the whole train split is in its cache.
    manifest = manifest_lib.load(params)
    assert pipeline.cached_clips(params, manifest, "train") == len(manifest.split("train"))
    worker.wait_for(f"registered with 127.0.0.1:{port}")
    worker.wait_for("0 tasks")
    dispatcher.wait_for("1 workers")
    _stop(worker)
    _stop(dispatcher)
  finally:
    for lines in (worker, dispatcher):
      if lines is not None and lines.proc.poll() is None:
        lines.proc.kill()


def test_a_worker_needs_a_dispatcher(tone_params):
  run = subprocess.run([sys.executable, "-m", "audioclf.service", "worker",
                        f"--data_dir={tone_params.data_dir}"], capture_output=True, text=True,
                       timeout=120)
  assert run.returncode != 0 and "--dispatcher=host:port" in run.stderr


def test_training_refuses_a_data_service_it_cannot_use_yet(tone_params, tmp_path):
  import pytest  # pylint: disable=g-import-not-at-top
  import audioclf  # pylint: disable=g-import-not-at-top
  from audioclf.params import ParamError  # pylint: disable=g-import-not-at-top
  with pytest.raises(ParamError, match="--data_service=grpc://127.0.0.1:1: training from"):
    audioclf.train(tone_params.replace(model_dir=str(tmp_path / "m"),
                                       data_service="grpc://127.0.0.1:1"))


def test_sigterm_stops_a_server_between_its_status_lines():
  # Status every 60 s (the default): the signal must not wait for the next one.
  port = cluster.free_ports(1)[0]
  lines = _Lines(subprocess.Popen([sys.executable, "-m", "audioclf.service", "dispatcher",
                                   f"--port={port}"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True))
  try:
    lines.wait_for("listening")
    start = time.monotonic()
    _stop(lines)
    assert time.monotonic() - start < 30
  finally:
    if lines.proc.poll() is None:
      lines.proc.kill()
