r"""audioclf service dispatcher|worker: tf.data service servers for audioclf training.

  # On one host (any; it does little work):
  python -m audioclf service dispatcher --port=5050 --allow_remote_clients
  # On each input host, with the data and the same --cache_dir path as the trainer:
  python -m audioclf service worker --dispatcher=dispatcher-host:5050 --port=5051 \
      --allow_remote_clients --flagfile=flags/demo.flags
  # On the training host:
  python -m audioclf train --flagfile=flags/demo.flags --data_service=grpc://dispatcher-host:5050

Trust model: TensorFlow's tf.data service servers listen on every network
interface, with no authentication, and run any dataset graph a client sends:
anyone who can reach a port of the service can have its workers read any
file they can read. So neither server starts without --allow_remote_clients,
and each says so as it starts: run the service inside a private network.

A worker fills its cache for the flagfile's train split before it registers,
so it never serves a half-filled cache. Both print a status line every
--status_every_s seconds and end cleanly (exit 0) on SIGTERM or SIGINT.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from absl import app, flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags

FLAGS = flags.FLAGS
ROLES = ("dispatcher", "worker")


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.data import manifest as manifest_lib
  from audioclf.data import pipeline
  from audioclf.data import service as data_service
  from audioclf.compat import private
  from audioclf.distributed import servers
  # pylint: enable=g-import-not-at-top
  if len(argv) != 2 or argv[1] not in ROLES:
    raise app.UsageError(f"say which server to run: one of {ROLES}, got {argv[1:]}")
  # Refused before anything else, a worker's cache fill among it.
  servers.check_allowed(FLAGS.allow_remote_clients, argv[1])
  if argv[1] == "dispatcher":
    server = servers.dispatcher(FLAGS.port, FLAGS.allow_remote_clients)
    stop = servers.stop_on_signals()
    _say_trust_model("dispatcher", server.target.rsplit(":", 1)[-1])
    print(f"dispatcher listening at {server.target}", flush=True)
    servers.serve(server, lambda: f"dispatcher {server.target}: {private.server_load(server)} "
                  "workers", stop, FLAGS.status_every_s)
    return
  if not FLAGS.dispatcher:
    raise app.UsageError("a worker needs --dispatcher=host:port")
  params = command_flags.params_from_flags()
  manifest = manifest_lib.load(params)
  # Fill first: a worker serves a complete cache or nothing.
  decoded = pipeline.fill_cache(params, manifest, splits=("train",))
  listing = data_service.publish(params, manifest)
  print(f"cache ready ({decoded} files decoded) for {params.data_dir or params.manifest}; "
        f"listed in {listing}", flush=True)
  server = servers.worker(FLAGS.dispatcher, FLAGS.port, FLAGS.worker_host,
                          FLAGS.allow_remote_clients)
  stop = servers.stop_on_signals()
  _say_trust_model("worker", FLAGS.port or "any free one")
  print(f"worker registered with {FLAGS.dispatcher}", flush=True)
  servers.serve(server, lambda: f"worker of {FLAGS.dispatcher}: {private.server_load(server)} "
                "tasks", stop, FLAGS.status_every_s)


def _say_trust_model(role: str, port) -> None:
  from audioclf.distributed import servers  # pylint: disable=g-import-not-at-top
  print(servers.TRUST_MODEL.format(role=role, port=port), file=sys.stderr, flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_service_flags()
  cli.run(main, argv, __doc__, arguments=True)  # The role: dispatcher or worker.


if __name__ == "__main__":
  run()
