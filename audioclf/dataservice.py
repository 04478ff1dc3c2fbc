"""tf.data service for audioclf: its dispatcher and worker servers, and where training uses them.

The service moves the input pipeline off the training host: workers (each on
a host with the data and a filled cache) run the training pipeline and send
the batches; the trainer only receives them. Mode `distributed_epoch` hands
each element of the pipeline's source (the example numbers the sampler turns
into (epoch, file) pairs) to one worker only, so each clip is read exactly
once per epoch across all workers. A pipeline that runs on a worker must hold
no Python (`tf.numpy_function` callbacks live in the process that made them),
so the service reads the cache with native ops only.
"""

from __future__ import annotations

import socket
from typing import Optional

import tensorflow as tf

from audioclf.params import DATA_SERVICE_ADDRESS


def check_address(address: str) -> str:
  """`address` if it is a service address, grpc://host:port.

  Raises:
    ValueError: anything else.
  """
  if not DATA_SERVICE_ADDRESS.match(address or ""):
    raise ValueError(f"a tf.data service address is grpc://host:port, got {address!r}")
  return address


def dispatcher(port: int) -> tf.data.experimental.service.DispatchServer:
  """A started dispatcher on `port` (0: any free one; see `.target`)."""
  return tf.data.experimental.service.DispatchServer(
      tf.data.experimental.service.DispatcherConfig(port=port))


def worker(dispatcher_address: str, port: int = 0,
           host: Optional[str] = None) -> tf.data.experimental.service.WorkerServer:
  """A started worker that registers with `dispatcher_address` (host:port, no scheme).

  Args:
    dispatcher_address: where the dispatcher listens.
    port: the worker's port (0: any free one).
    host: the name trainers reach this worker by (default: this host's name);
      the dispatcher hands it to them as is.
  """
  host = host or socket.gethostname()
  return tf.data.experimental.service.WorkerServer(tf.data.experimental.service.WorkerConfig(
      dispatcher_address=dispatcher_address, worker_address=f"{host}:%port%", port=port))


def distribute(dataset: tf.data.Dataset, address: str,
               job_name: Optional[str] = None) -> tf.data.Dataset:
  """`dataset`'s elements from the service at `address`, each source element sent once.

  Trainers that pass the same job_name share one job: between them, they
  receive each element once (distributed_epoch, "dynamic sharding").
  """
  return dataset.apply(tf.data.experimental.service.distribute(
      processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC,
      service=check_address(address), job_name=job_name))
