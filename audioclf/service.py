"""python -m audioclf.service dispatcher|worker: tf.data service servers for audioclf training.

  # On one host (any; it does little work):
  python -m audioclf.service dispatcher --port=5050
  # On each input host, with the data and the same --cache_dir path as the trainer:
  python -m audioclf.service worker --dispatcher=dispatcher-host:5050 --port=5051 \
      --flagfile=flags/demo.flags
  # On the training host:
  python -m audioclf.train --flagfile=flags/demo.flags --data_service=grpc://dispatcher-host:5050

A worker fills its cache for the flagfile's train split before it registers,
so it never serves a half-filled cache. Both print a status line every
--status_every_s seconds and end cleanly (exit 0) on SIGTERM or SIGINT.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from absl import app, flags

from audioclf import cli

_PORT = flags.DEFINE_integer("port", 0, "Port to listen on (0: any free one, printed).",
                             lower_bound=0)
_DISPATCHER = flags.DEFINE_string("dispatcher", None,
                                  "worker: the dispatcher's host:port.")
_WORKER_HOST = flags.DEFINE_string("worker_host", None, "worker: the name trainers reach this "
                                   "host by (default: its host name).")
_STATUS_EVERY_S = flags.DEFINE_float("status_every_s", 60.0, "Seconds between status lines.",
                                     lower_bound=0.1)

ROLES = ("dispatcher", "worker")
_STOP_GRACE_S = 15.0  # How long a server may take to stop once told to.


def _stop_on_signals() -> threading.Event:
  """An event that SIGTERM or SIGINT sets from now on.

  Called before the line that says a server is up: whoever reads that line
  may signal at once (the handlers used to come after it, and a quick
  SIGTERM killed the process before it could stop its server).
  """
  stop = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stop.set())
  return stop


def _serve(server, status, stop: threading.Event) -> None:
  """Prints status() every --status_every_s until `stop` is set (a signal), then stops `server`.

  Waits in slices of a fraction of a second: the signal may land on one of
  TensorFlow's threads, and Python runs its handler only once the main
  thread wakes up.
  """
  start = last = time.monotonic()
  while not stop.wait(0.2):
    if time.monotonic() - last >= _STATUS_EVERY_S.value:
      last = time.monotonic()
      print(f"{status()}; up {last - start:.0f} s", flush=True)
  # WorkerServer.stop can wait for ever once its dispatcher is gone (seen here:
  # workers alive 12 minutes after SIGTERM): the process ends regardless.
  watchdog = threading.Timer(_STOP_GRACE_S, os._exit, args=(0,))
  watchdog.daemon = True
  watchdog.start()
  server.stop()
  print("stopped", flush=True)


def main(argv):
  from audioclf import dataservice, pipeline  # pylint: disable=g-import-not-at-top
  from audioclf import manifest as manifest_lib  # pylint: disable=g-import-not-at-top

  if len(argv) != 2 or argv[1] not in ROLES:
    raise app.UsageError(f"say which server to run: one of {ROLES}, got {argv[1:]}")
  if argv[1] == "dispatcher":
    server = dataservice.dispatcher(_PORT.value)
    stop = _stop_on_signals()
    print(f"dispatcher listening at {server.target}", flush=True)
    _serve(server, lambda: f"dispatcher {server.target}: {server._num_workers()} workers", stop)  # pylint: disable=protected-access
    return
  if not _DISPATCHER.value:
    raise app.UsageError("a worker needs --dispatcher=host:port")
  params = cli.params_from_flags()
  manifest = manifest_lib.load(params)
  # Fill first: a worker serves a complete cache or nothing.
  decoded = pipeline.fill_cache(params, manifest, splits=("train",))
  listing = dataservice.publish(params, manifest)
  print(f"cache ready ({decoded} files decoded) for {params.data_dir or params.manifest}; "
        f"listed in {listing}", flush=True)
  server = dataservice.worker(_DISPATCHER.value, _PORT.value, _WORKER_HOST.value)
  stop = _stop_on_signals()
  print(f"worker registered with {_DISPATCHER.value}", flush=True)
  _serve(server, lambda: f"worker of {_DISPATCHER.value}: {server._num_tasks()} tasks", stop)  # pylint: disable=protected-access


def run():
  cli.define_flags()
  cli.run(main)


if __name__ == "__main__":
  run()
