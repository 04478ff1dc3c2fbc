"""TF_CONFIG: the cluster a process belongs to and its task in it, and loopback clusters to try.

The tasks' roles follow TensorFlow's conventions. Without parameter servers
(Keras' MultiWorkerMirroredStrategy) the cluster is `worker` tasks, worker 0
being the chief; with them (the Estimator's between-graph replication) it is a
`chief`, `worker`s and `ps`, and an `evaluator` outside the cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
from typing import Optional

CHIEF = ("chief", 0)


def free_ports(count: int) -> list[int]:
  """`count` distinct TCP ports on 127.0.0.1 that nothing listens on right now.

  The sockets are held open together until all are chosen, so no port comes
  twice; a port may still be taken by another program before a task binds it.
  """
  with contextlib.ExitStack() as stack:
    sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
               for _ in range(count)]
    for s in sockets:
      s.bind(("127.0.0.1", 0))
    return [s.getsockname()[1] for s in sockets]


def loopback_cluster(workers: int, ps: int = 0) -> dict[str, list[str]]:
  """The cluster spec of `workers` training tasks (and `ps` parameter servers) on 127.0.0.1.

  Without ps: `worker` tasks only, worker 0 the chief (MultiWorkerMirroredStrategy).
  With ps: one `chief` and workers - 1 `worker` tasks beside the ps tasks
  (the Estimator's between-graph replication needs a chief job).

  Raises:
    ValueError: fewer than one worker, or a negative ps count.
  """
  if workers < 1 or ps < 0:
    raise ValueError(f"a cluster needs at least one worker and no negative ps count, "
                     f"got workers={workers}, ps={ps}")
  addresses = [f"127.0.0.1:{port}" for port in free_ports(workers + ps)]
  if not ps:
    return {"worker": addresses}
  cluster = {"chief": addresses[:1], "ps": addresses[workers:]}
  if workers > 1:
    cluster["worker"] = addresses[1:workers]
  return cluster


def tasks_of(cluster: dict[str, list[str]], evaluator: bool = False) -> list[tuple[str, int]]:
  """Every task of `cluster` as (type, index), the chief first; the evaluator last if asked."""
  order = ("chief", "worker", "ps")
  tasks = [(kind, i) for kind in order for i in range(len(cluster.get(kind, ())))]
  return tasks + ([("evaluator", 0)] if evaluator else [])


def chief_of(cluster: dict[str, list[str]]) -> tuple[str, int]:
  return CHIEF if cluster.get("chief") else ("worker", 0)


@dataclasses.dataclass(frozen=True)
class Task:
  """This process's place in a cluster, as TF_CONFIG names it."""

  type: str  # "chief", "worker", "ps" or "evaluator".
  index: int
  cluster: dict  # The cluster spec: job name -> addresses.

  @property
  def is_chief(self) -> bool:
    """The task that writes model_dir: the chief, else worker 0 where there is no chief job."""
    return (self.type, self.index) == chief_of(self.cluster)

  @property
  def num_workers(self) -> int:
    """The training tasks: the chief and the workers."""
    return len(self.cluster.get("chief", ())) + len(self.cluster.get("worker", ()))

  @property
  def worker_id(self) -> int:
    """This training task's number among num_workers, the chief first."""
    if self.type not in ("chief", "worker"):
      raise ValueError(f"a {self.type} task does not train")
    return self.index + (len(self.cluster.get("chief", ())) if self.type == "worker" else 0)


def current_task(environ=None) -> Optional[Task]:
  """The task TF_CONFIG names in `environ` (default os.environ), or None outside a cluster.

  Raises:
    ValueError: TF_CONFIG is set but not a cluster spec with a task in it.
  """
  raw = (os.environ if environ is None else environ).get("TF_CONFIG", "")
  if not raw.strip():
    return None
  try:
    config = json.loads(raw)
    cluster, task = config.get("cluster") or {}, config.get("task") or {}
    if not cluster:
      return None
    result = Task(str(task["type"]), int(task.get("index", 0)), cluster)
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise ValueError(f"TF_CONFIG is not a cluster spec with a task: {raw!r} ({e})") from e
  if result.type != "evaluator" and result.index >= len(cluster.get(result.type, ())):
    raise ValueError(f"TF_CONFIG names task {result.type}:{result.index}, which its cluster "
                     f"{cluster} does not have")
  return result


def tf_config(cluster: dict[str, list[str]], task: tuple[str, int]) -> str:
  return json.dumps({"cluster": cluster, "task": {"type": task[0], "index": task[1]}})
