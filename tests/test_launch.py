"""The loopback launcher: TF_CONFIGs, prefixed logs, exit codes, and stopping every task."""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from audioclf.distributed import cluster as cluster_lib
from audioclf.distributed import launcher
import warm

# Each task prints its TF_CONFIG's task, then behaves by its type: ps tasks
# serve until stopped (as a real ps does), the others end with the code that
# EXIT names for them, or hang when it says "hang".
TASK = textwrap.dedent("""
    import json, os, sys, time
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]["type"] + ":" + str(config["task"]["index"])
    print(json.dumps(config), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if os.environ.get("PIDS"):
      with open(os.path.join(os.environ["PIDS"], task), "w") as f:
        f.write(str(os.getpid()))
    behaviour = json.loads(os.environ.get("EXIT", "{}")).get(task, 0)
    if config["task"]["type"] == "ps" or behaviour == "hang":
      time.sleep(600)
    time.sleep(0.3)
    sys.exit(behaviour)
""")


def _run(cluster, monkeypatch, exits=None, evaluator=False):
  monkeypatch.setenv("EXIT", json.dumps(exits or {}))
  out, err = io.StringIO(), io.StringIO()
  runner = launcher.Cluster(cluster, [sys.executable, "-c", TASK], evaluator=evaluator,
                               out=out, err=err, stop_grace_s=5)
  start = time.monotonic()
  code = runner.run()
  return code, out.getvalue(), err.getvalue(), time.monotonic() - start


def test_loopback_cluster_shapes():
  keras = cluster_lib.loopback_cluster(3)
  assert list(keras) == ["worker"] and len(keras["worker"]) == 3
  estimator = cluster_lib.loopback_cluster(2, ps=1)
  assert {k: len(v) for k, v in estimator.items()} == {"chief": 1, "worker": 1, "ps": 1}
  addresses = [a for v in estimator.values() for a in v]
  assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:") for a in addresses)
  assert cluster_lib.chief_of(keras) == ("worker", 0)
  assert cluster_lib.chief_of(estimator) == ("chief", 0)
  with pytest.raises(ValueError, match="at least one worker"):
    cluster_lib.loopback_cluster(0)


def test_every_task_gets_its_tf_config_and_the_ps_is_stopped_at_the_end(monkeypatch):
  cluster = cluster_lib.loopback_cluster(2, ps=1)
  code, out, err, seconds = _run(cluster, monkeypatch, evaluator=True)
  assert code == 0
  assert seconds < 30  # The ps serves forever: the launcher ended it.
  seen = {}
  for line in out.splitlines():
    prefix, _, rest = line.partition("] ")
    config = json.loads(rest)
    assert config["cluster"] == cluster
    task = config["task"]
    assert prefix == f"[{task['type']}:{task['index']}"
    seen[(task["type"], task["index"])] = True
  assert set(seen) == {("chief", 0), ("worker", 0), ("ps", 0), ("evaluator", 0)}
  assert "[ps:0] to stderr" in err and "stopping the parameter servers" in err


def test_the_chief_exit_code_is_returned(monkeypatch):
  code, _, _, _ = _run(cluster_lib.loopback_cluster(2), monkeypatch, exits={"worker:0": 3})
  assert code == 3


def test_a_failing_task_stops_the_others(monkeypatch):
  cluster = cluster_lib.loopback_cluster(3, ps=1)
  code, _, err, seconds = _run(cluster, monkeypatch,
                               exits={"worker:1": 5, "chief:0": "hang", "worker:0": "hang"})
  assert code == 5
  assert seconds < 30
  assert "worker:1 exited with 5; stopping the other tasks" in err


def test_launch_command_stops_its_tasks_on_sigterm(tmp_path):
  # The launcher with a module that hangs on every task: SIGTERM must end them all.
  pids = tmp_path / "pids"
  pids.mkdir()
  module = tmp_path / "hanging_task.py"
  module.write_text(TASK)
  env = dict(os.environ, PIDS=str(pids), EXIT=json.dumps({"worker:0": "hang", "worker:1": "hang"}),
             PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
  launcher = warm.Popen([sys.executable, "-m", "audioclf", "launch", "--workers=2",
                         "--module=hanging_task"], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 60
    while len(list(pids.iterdir())) < 2:
      assert time.monotonic() < deadline and launcher.poll() is None, launcher.communicate()
      time.sleep(0.1)
    launcher.send_signal(signal.SIGTERM)
    _, err = launcher.communicate(timeout=60)
  finally:
    # A failed wait must not leave the launcher (and its tasks) running after the test.
    if launcher.poll() is None:
      launcher.kill()
      launcher.wait()
      for path in pids.iterdir():
        try:
          os.kill(int(path.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
          pass
  assert launcher.returncode == 128 + signal.SIGTERM, err
  assert "stopping every task" in err
  for path in pids.iterdir():
    with pytest.raises(ProcessLookupError):
      os.kill(int(path.read_text()), 0)
