"""tests/warm.py: a forked command is its own process, and only what may be forked is."""

import json
import os
import signal
import subprocess
import sys

import pytest

import warm

# What a process can tell of itself, and whether TensorFlow was there before it started.
SELF = ("import json, os, sys; print(json.dumps({'pid': os.getpid(), 'argv': sys.argv, "
        "'cwd': os.getcwd(), 'mark': os.environ.get('WARM_MARK'), 'path0': sys.path[0], "
        "'warm': 'tensorflow' in sys.modules})); sys.stderr.write('to stderr'); sys.exit(3)")
FORKED = warm.ENABLED


def test_a_forked_process_has_its_own_pid_argv_folder_environment_streams_and_status(tmp_path):
  done = warm.run([sys.executable, "-c", SELF, "a", "b"], cwd=tmp_path, capture_output=True,
                  text=True, timeout=60, env=dict(os.environ, WARM_MARK="1"))
  seen = json.loads(done.stdout)
  assert done.returncode == 3 and done.stderr == "to stderr"
  assert seen["pid"] not in (os.getpid(), 0)
  assert seen["argv"] == ["-c", "a", "b"] and seen["cwd"] == str(tmp_path)
  assert seen["mark"] == "1" and seen["path0"] == ""
  assert seen["warm"] == FORKED  # TensorFlow was imported before the script ran: forked.


def test_a_forked_script_runs_as_python_would_run_it(tmp_path):
  (tmp_path / "tools").mkdir()
  (tmp_path / "tools" / "helper.py").write_text("MARK = 'helper'\n")
  (tmp_path / "tools" / "self.py").write_text(
      "import helper\n" + SELF.replace("'warm':", "'helper': helper.MARK, 'name': __name__, 'warm':"))
  done = warm.run([sys.executable, "tools/self.py", "a"], cwd=tmp_path, capture_output=True,
                  text=True, timeout=60)
  seen = json.loads(done.stdout)
  assert done.returncode == 3 and done.stderr == "to stderr"
  assert seen["argv"] == ["tools/self.py", "a"] and seen["name"] == "__main__"
  assert seen["path0"] == str(tmp_path / "tools") and seen["helper"] == "helper"
  assert seen["warm"] == FORKED
  # An interpreter option, or a file that is no script here, runs as a plain process.
  plain = warm.run([sys.executable, "missing.py"], cwd=tmp_path, capture_output=True, text=True,
                   timeout=60)
  assert plain.returncode == 2 and "missing.py" in plain.stderr


def test_a_module_runs_as_python_m_runs_it(tmp_path):
  (tmp_path / "here.py").write_text("import sys\nprint(__name__, sys.argv[1:], sys.path[0])\n")
  done = warm.run([sys.executable, "-m", "here", "x"], cwd=tmp_path, capture_output=True,
                  text=True, timeout=60)
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["__main__", "['x']", str(tmp_path)]


def test_a_forked_commands_own_python_forks_too_with_its_streams_unbuffered():
  # As audioclf launch starts its tasks: this interpreter, PYTHONUNBUFFERED=1 (and, the
  # control, without it: whatever the server's own variables were).
  inner = ("import json, sys; "
           "print(json.dumps(['tensorflow' in sys.modules, sys.stdout.write_through]))")
  outer = ("import os, subprocess, sys; env = dict(os.environ, PYTHONUNBUFFERED=sys.argv[1]); "
           "env.pop('PYTHONUNBUFFERED', None) if not sys.argv[1] else None; "
           f"print(subprocess.run([sys.executable, '-c', {inner!r}], env=env, "
           "capture_output=True, text=True).stdout, end='')")
  for unbuffered in ("1", ""):
    done = warm.run([sys.executable, "-c", outer, unbuffered], capture_output=True, text=True,
                    timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [FORKED, bool(unbuffered)]


def test_a_signal_reaches_the_process_and_its_status_comes_back():
  proc = warm.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                    stdout=subprocess.PIPE, text=True)
  assert proc.stdout.readline() == "up\n"
  assert proc.poll() is None
  proc.send_signal(signal.SIGTERM)
  assert proc.wait(30) == -signal.SIGTERM
  proc.stdout.close()


def test_a_timeout_kills_it():
  with pytest.raises(subprocess.TimeoutExpired):
    warm.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)


def test_what_tensorflow_reads_at_its_start_sends_the_command_to_a_plain_process():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
  done = warm.run([sys.executable, "-c", SELF], capture_output=True, text=True, timeout=60,
                  env=env)
  assert json.loads(done.stdout)["warm"] is False
  assert warm._request([sys.executable, "-c", SELF], {"env": env}) is None  # pylint: disable=protected-access
  assert warm._request(["/bin/true"], {}) is None  # pylint: disable=protected-access
