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

import os
import socket
import warnings
from typing import Optional

import tensorflow as tf

from audioclf import files
from audioclf.data.manifest import NOISE_FOLDER, DataError, Manifest
from audioclf.data import store as store_lib
from audioclf.params import DATA_SERVICE_ADDRESS, Params


def check_address(address: str) -> str:
  """`address` if it is a service address, grpc://host:port.

  Raises:
    ValueError: anything else.
  """
  if not DATA_SERVICE_ADDRESS.match(address or ""):
    raise ValueError(f"a tf.data service address is grpc://host:port, got {address!r}")
  return address


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
  """Raises DataError unless a server accepts connections at `address` (grpc://host:port).

  A tf.data service client waits for its dispatcher without end; a run whose
  dispatcher never started (or stopped) would hang instead of saying so.
  """
  host, port = check_address(address)[len("grpc://"):].rsplit(":", 1)
  try:
    socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
  except OSError as e:
    raise DataError(f"--data_service={address}: no tf.data service dispatcher answers there "
                    f"({e.strerror or e}); start one with python -m audioclf service dispatcher "
                    "--allow_remote_clients") from e


def distribute(dataset: tf.data.Dataset, address: str,
               job_name: Optional[str] = None) -> tf.data.Dataset:
  """`dataset`'s elements from the service at `address`, each source element sent once.

  Trainers that pass the same job_name share one job: between them, they
  receive each element once (distributed_epoch, "dynamic sharding").
  """
  with warnings.catch_warnings():
    # TensorFlow's distribute reads dataset.options(), which in a graph (the
    # Estimator's) warns that the value may be stale: it reads only the
    # external state policy, which audioclf never sets.
    warnings.filterwarnings("ignore", "To make it possible to preserve tf.data options",
                            UserWarning)
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC,
        service=check_address(address), job_name=job_name))


def listing(params: Params, manifest: Manifest, split: str = "train") -> str:
  """What a host holds as `split`: each file's path under the data root and content fingerprint.

  Paths are relative, so a dataset copied to another folder (or host) lists
  the same; fingerprints are of the content, so mtimes do not matter. Where
  training mixes in background noise, the recordings too (noise/<path under
  their folder>): the workers mix them in from their own cache.
  """
  root = params.data_dir or os.path.dirname(os.path.abspath(params.manifest))
  examples = list(manifest.files(split))  # What the cache holds: no virtual _silence_ clips.
  names = [os.path.relpath(e.path, root) for e in examples]
  if split == "train" and params.noise_prob > 0:
    folder = params.noise_dir or os.path.join(root, NOISE_FOLDER)
    examples += manifest.noise
    names += [f"noise/{os.path.relpath(e.path, folder)}" for e in manifest.noise]
  fingerprints = store_lib.Store.for_params(params).fingerprints.of(examples)
  return "".join(f"{name}\t{fp}\n" for name, fp in zip(names, fingerprints))


def _listing_path(params: Params, split: str) -> str:
  return os.path.join(store_lib.Store.for_params(params).root, "served", f"{split}.tsv")


def publish(params: Params, manifest: Manifest, split: str = "train") -> str:
  """Writes this worker's listing of `split` where trainers look for it (under the cache root)."""
  path = _listing_path(params, split)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  files.atomic_write(path, listing(params, manifest, split).encode())
  return path


def check_workers(params: Params, manifest: Manifest, split: str = "train") -> None:
  """Raises DataError unless every worker of params.data_service holds this host's `split`.

  Each worker reads its published listing with native ops in a small job of
  its own (parallel_epochs: every worker sends one element) and the trainer
  compares them with its own, file by file.

  Raises:
    manifest.DataError: a worker has not published the split (it has not
      filled this cache), or its files differ; the message names them.
  """
  check_reachable(params.data_service)
  path = _listing_path(params, split)
  probe = tf.data.Dataset.from_tensors(tf.constant(path)).map(tf.io.read_file).apply(
      tf.data.experimental.service.distribute(
          processing_mode=tf.data.experimental.service.ShardingPolicy.OFF,
          service=check_address(params.data_service)))
  try:
    theirs = [t.numpy().decode() for t in probe]
  except tf.errors.NotFoundError as e:
    raise DataError(f"a tf.data service worker of {params.data_service} has no {path}: it has "
                    "not filled the cache for this data, or uses another --cache_dir or decoding "
                    "parameters (python -m audioclf service worker --flagfile=<this run's>)") from e
  ours = dict(line.split("\t") for line in listing(params, manifest, split).splitlines())
  for text in theirs:
    other = dict(line.split("\t") for line in text.splitlines())
    differing = sorted(name for name in ours.keys() | other.keys()
                       if ours.get(name) != other.get(name))
    if differing:
      shown = ", ".join(differing[:10]) + (f" and {len(differing) - 10} more"
                                           if len(differing) > 10 else "")
      raise DataError(f"a tf.data service worker of {params.data_service} holds another "
                      f"{split!r} split than this host: {len(differing)} files differ or are "
                      f"missing on one side: {shown}")
