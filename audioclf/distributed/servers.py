"""tf.data service servers: a dispatcher and workers, started, and served until a signal stops them.

Which batches the workers make, and how a trainer reads them, is the data
layer's business (audioclf.data.service); this is the servers' lifecycle.

The trust model: a tf.data service runs whatever dataset graph a client
sends, and a graph can read any file its worker can. TensorFlow gives its
servers no choice of address and no credentials: GrpcDataServerBase::Start
listens on "0.0.0.0:<port>" (TensorFlow 2.15 and 2.21 alike), and its pip
builds register only the insecure "grpc" protocol ("grpc+local" is refused:
no credentials factory). So a server here is reachable from every host that
reaches this one, by anyone, and starts only when the user says that is
what they want (`allow_remote_clients`, the `--allow_remote_clients` flag);
it then says so (`TRUST_MODEL`). Run it inside a private network only.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Callable, Optional

import tensorflow as tf

from audioclf.params import ParamError

STOP_GRACE_S = 15.0  # How long a server may take to stop once told to.
# Every server listens here, whatever it is asked (see the module's docstring).
BIND_ADDRESS = "0.0.0.0"
TRUST_MODEL = ("audioclf: this tf.data service {role} listens on every network interface "
               "(port {port}) with no authentication, as TensorFlow's servers always do: "
               "anyone who can reach the service's ports can have its workers read any file "
               "they can read. Run the service only inside a private network.")


def check_allowed(allow_remote_clients: bool, role: str) -> None:
  """Raises ParamError unless the user accepted a server that every host can reach.

  Raises:
    ParamError: `allow_remote_clients` is False; says why, naming the flag.
  """
  if not allow_remote_clients:
    raise ParamError(
        f"a tf.data service {role} starts only with --allow_remote_clients: TensorFlow's "
        f"servers listen on every network interface ({BIND_ADDRESS}) with no authentication, "
        "so anyone who can reach the port can have the workers read any file they can read; "
        "pass it inside a private network only")


def dispatcher(port: int, allow_remote_clients: bool = False,
               ) -> tf.data.experimental.service.DispatchServer:
  """A started dispatcher on `port` (0: any free one; see `.target`).

  Raises:
    ParamError: `allow_remote_clients` is not set (see `check_allowed`).
  """
  check_allowed(allow_remote_clients, "dispatcher")
  return tf.data.experimental.service.DispatchServer(
      tf.data.experimental.service.DispatcherConfig(port=port))


def worker(dispatcher_address: str, port: int = 0, host: Optional[str] = None,
           allow_remote_clients: bool = False) -> tf.data.experimental.service.WorkerServer:
  """A started worker that registers with `dispatcher_address` (host:port, no scheme).

  Args:
    dispatcher_address: where the dispatcher listens.
    port: the worker's port (0: any free one).
    host: the name trainers reach this worker by (default: this host's name);
      the dispatcher hands it to them as is.
    allow_remote_clients: the user's word that a server every host can reach,
      unauthenticated, is what they want.

  Raises:
    ParamError: `allow_remote_clients` is not set (see `check_allowed`).
  """
  check_allowed(allow_remote_clients, "worker")
  host = host or socket.gethostname()
  return tf.data.experimental.service.WorkerServer(tf.data.experimental.service.WorkerConfig(
      dispatcher_address=dispatcher_address, worker_address=f"{host}:%port%", port=port))


def stop_on_signals() -> threading.Event:
  """An event that SIGTERM or SIGINT sets from now on.

  Call it before the line that says a server is up: whoever reads that line
  may signal at once, and the process must then stop its server, not die.
  """
  stop = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stop.set())
  return stop


def serve(server, status: Callable[[], str], stop: threading.Event,
          status_every_s: float = 60.0) -> None:
  """Prints status() every `status_every_s` until `stop` is set (a signal), then stops `server`.

  Waits in slices of a fraction of a second: the signal may land on one of
  TensorFlow's threads, and Python runs its handler only once the main
  thread wakes up.
  """
  start = last = time.monotonic()
  while not stop.wait(0.2):
    if time.monotonic() - last >= status_every_s:
      last = time.monotonic()
      print(f"{status()}; up {last - start:.0f} s", flush=True)
  # WorkerServer.stop can wait for ever once its dispatcher is gone (seen here:
  # workers alive 12 minutes after SIGTERM): the process ends regardless.
  watchdog = threading.Timer(STOP_GRACE_S, os._exit, args=(0,))
  watchdog.daemon = True
  watchdog.start()
  server.stop()
  print("stopped", flush=True)
