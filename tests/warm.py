"""The tests' subprocesses of this interpreter, forked from one that has imported TensorFlow already.

A test runs audioclf as its users do, in a process of its own (`python -m
audioclf ...`, or a script with `-c`), and each such process used to spend
3-5 s of CPU importing TensorFlow and Keras before doing anything: the
larger part of the suite's time. `run` and `Popen` take subprocess's
arguments. Where the command is this interpreter with `-m`, `-c` or a
script (a .py file: `python tools/x.py ...`), and the
environment changes nothing TensorFlow reads while it starts, the process is
forked from a server (one per test process, `python tests/warm.py`) that
imported numpy, soundfile, TensorFlow and Keras and ran no TensorFlow op;
anything else runs as a plain subprocess. A forked process is the
command's own in every way a test can see: its pid (signals go straight to
it), argv, environment, working folder, standard streams, session, exit
status, and a normal interpreter exit (atexit hooks, finalization); only its
parent is the server, which reports its status back.

A forked command's own processes of this interpreter (audioclf launch's
tasks) fork from the same server. Any other program that a test runs and
that starts `python` itself can fork its commands too: `python
tests/warm.py --client ...` in place of `python ...` (`client`;
tests/test_docs.py gives check_docs such a venv python).
AUDIOCLF_TEST_FORK=0 runs every one as a plain subprocess;
AUDIOCLF_TEST_FORK_LOG=FILE says in FILE why a command ran as one.
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Optional

ENABLED = os.environ.get("AUDIOCLF_TEST_FORK", "1") != "0" and hasattr(os, "pidfd_open")
# What the server imports before it serves: the heavy part of every command's start.
PRELOAD = ("numpy", "soundfile", "tensorflow", "keras")
# Variables read while Python, TensorFlow or its libraries start (or while audioclf decides how
# quiet TensorFlow's import is): a request whose value differs from the server's runs plainly.
# TF_CONFIG is read later, by the cluster code, so it may differ; a forked process takes
# PYTHONPATH into sys.path itself, and PYTHONUNBUFFERED (audioclf launch gives it to its tasks)
# into its standard streams. scikit-learn and joblib set two KMP_ ones when first imported
# (into whichever process imports them), read only by Intel's OpenMP, which nothing here loads.
_AT_START = re.compile(r"(TF_|XLA_|OMP_|KMP_|MKL|OPENBLAS|CUDA|NVIDIA|LD_|MALLOC|GRPC|ABSL|"
                       r"KERAS|TPU|PYTHON|AUDIOCLF_VERBOSE$)")
_LATER = {"TF_CONFIG", "PYTHONPATH", "PYTHONUNBUFFERED", "KMP_DUPLICATE_LIB_OK",
          "KMP_INIT_AT_FORK"}
_STATUS = struct.Struct("!q")
# A request's option for `python SCRIPT ARGS...` (its target the script, as given).
SCRIPT = "script"


def _startup_env(env, command: bool = False) -> dict:
  """The variables of `env` that TensorFlow's start reads; `command`: for an audioclf command.

  A command imports TensorFlow at TF_CPP_MIN_LOG_LEVEL 2 unless told otherwise
  (audioclf.commands.quiet), as the server did.
  """
  found = {k: v for k, v in env.items() if _AT_START.match(k) and k not in _LATER}
  if command:
    found.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return found


class _Server:
  """One warm server of an interpreter for this process: started once, ended with it."""

  def __init__(self, python: str):
    self.path = os.path.join(tempfile.mkdtemp(prefix="audioclf-warm-"), "socket")
    self.env = None  # The server's variables once it is ready (`_server_env`).
    self._log = open(self.path + ".log", "w+b")  # pylint: disable=consider-using-with
    self.proc = subprocess.Popen([python, os.path.abspath(__file__), self.path],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
    self._ready = None
    self._lock = threading.Lock()
    atexit.register(self.stop)

  def ready(self) -> bool:
    """Whether the server is serving; waits for its imports the first time."""
    with self._lock:
      if self._ready is None:
        self._ready = self.proc.stdout.readline() == b"ready\n"
        if self._ready:
          self.env = _server_env(self.path)
        else:
          self._log.seek(0)
          warnings.warn("tests/warm.py: the warm server did not start; plain subprocesses from "
                        f"now on: {self._log.read()[-2000:]!r}")
      return self._ready

  def stop(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.close()  # The server ends at the end of its input.
      try:
        self.proc.wait(10)
      except subprocess.TimeoutExpired:
        self.proc.kill()
    self._log.close()
    shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


def _server_env(path: str) -> dict:
  """The variables of the server at `path` once TensorFlow started (which sets a few itself)."""
  with open(path + ".env", encoding="utf-8") as f:
    return json.load(f)


class _Remote:
  """Another process's server, which `client` forks from: its socket and variables."""

  def __init__(self, path: str):
    self.path = path
    self.env = _server_env(path)

  def ready(self) -> bool:
    return True


# Each interpreter's server, by the path a command names it with: this one's (sys.executable)
# and those a test asked for (`start`), or in a forked command those of the process it came from.
_SERVERS = {}
_SERVER_LOCK = threading.Lock()
# Where `client` finds the server to fork from: set by a test for the programs it runs.
SOCKET_ENV = "AUDIOCLF_TEST_FORK_SOCKET"


def start(python: Optional[str] = None):
  """Starts the server of `python` (default: this one), which imports while tests go on; once.

  Another interpreter's (the legacy stack's, from a current-stack test):
  its commands fork from then on, and so do those that the forked commands
  of any interpreter start with it (a migrate --report's legacy predict).

  Returns:
    The server, or None where forking is off.
  """
  python = python or sys.executable
  with _SERVER_LOCK:
    if ENABLED and python not in _SERVERS:
      _SERVERS[python] = _Server(python)
    return _SERVERS.get(python)


def _request(args, kwargs):
  """The server's request for Popen(args, **kwargs), or None where it runs as a plain process."""
  args = list(args) if isinstance(args, (list, tuple)) else None
  unsupported = ("executable", "preexec_fn", "pass_fds", "shell", "user", "group",
                 "extra_groups", "umask", "process_group")
  if (not ENABLED or args is None or len(args) < 2
      or (args[0] != sys.executable and args[0] not in _SERVERS)
      or any(kwargs.get(k) for k in unsupported)):
    return None
  if args[1] in ("-m", "-c"):
    if len(args) < 3:
      return None
  elif not (str(args[1]).endswith(".py") and os.path.isfile(
      os.path.join(kwargs.get("cwd") or "", args[1]))):
    return None  # An option of the interpreter's own, or no script of ours.
  else:
    args = [args[0], SCRIPT, *args[1:]]  # `python SCRIPT ARGS...`
  env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
  command = args[1] == "-m" and args[2].split(".")[0] == "audioclf"
  if any(str(a).startswith(("--verbosity", "-v=", "-v ")) for a in args[3:]):
    return None  # Verbose: the command imports TensorFlow with its chatter.
  server = start(args[0])
  if not server.ready():
    return None
  differ = {k for k, v in _startup_env(env, command).items() ^ _startup_env(server.env).items()}
  if differ:
    _log(f"plain (differ: {sorted(differ)}): {args[:3]!r:.200}")
    return None
  return {"option": args[1], "target": args[2], "argv": [str(a) for a in args[3:]],
          "env": env, "cwd": os.fspath(kwargs.get("cwd") or os.getcwd()),
          "new_session": bool(kwargs.get("start_new_session")), "socket": server.path,
          "servers": {python: other.path for python, other in list(_SERVERS.items())
                      if _serving(other) and other.ready()}}


def _serving(server) -> bool:
  """Whether `server` serves already (no wait for one still importing: its commands run plain)."""
  return os.path.exists(server.path + ".env")


def _log(line: str) -> None:
  """AUDIOCLF_TEST_FORK_LOG=FILE: why a command ran as a plain subprocess."""
  path = os.environ.get("AUDIOCLF_TEST_FORK_LOG")
  if path:
    with open(path, "a", encoding="utf-8") as f:
      f.write(line + "\n")


class Popen(subprocess.Popen):
  """subprocess.Popen, forked from the warm server where `_request` allows."""

  def __init__(self, args, *rest, **kwargs):
    # subprocess's options given by position (bufsize, executable, ...): a plain process.
    self._warm = None if rest else _request(args, kwargs)
    self._conn = None
    super().__init__(args, *rest, **kwargs)

  def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                     startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                     errread, errwrite, *rest):  # pylint: disable=arguments-differ
    if self._warm is None:
      return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd,
                                    env, startupinfo, creationflags, shell, p2cread, p2cwrite,
                                    c2pread, c2pwrite, errread, errwrite, *rest)
    streams = [fd if fd != -1 else _open_or_null(default) for fd, default in
               ((p2cread, 0), (c2pwrite, 1), (errwrite, 2))]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(self._warm["socket"])
    socket.send_fds(conn, [json.dumps(self._warm).encode()], streams)
    conn.shutdown(socket.SHUT_WR)
    for fd in streams:
      if fd not in (p2cread, c2pwrite, errwrite, 0, 1, 2):
        os.close(fd)
    pid = _receive_status(conn, block=True)
    if pid is None:
      conn.close()
      raise OSError(f"tests/warm.py: the warm server did not start {args[:3]}")
    self.pid, self._conn, self._child_created = pid, conn, True
    self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
    return None

  def _try_wait(self, wait_flags):
    if self._conn is None:
      return super()._try_wait(wait_flags)
    status = _receive_status(self._conn, block=not wait_flags & os.WNOHANG)
    if status is False:
      return 0, 0
    self._conn.close()
    # A server gone before it told: as if the process had died by SIGKILL.
    return self.pid, signal.SIGKILL if status is None else status

  def _internal_poll(self, _deadstate=None, **_):
    if self._conn is None:
      return super()._internal_poll(_deadstate)
    if self.returncode is None and self._waitpid_lock.acquire(False):
      try:
        if self.returncode is None:
          pid, status = self._try_wait(os.WNOHANG)
          if pid == self.pid:
            self._handle_exitstatus(status)
      finally:
        self._waitpid_lock.release()
    return self.returncode


def _open_or_null(fd: int) -> int:
  """`fd` where this process has it open (the child inherits it), else a new /dev/null."""
  try:
    os.fstat(fd)
    return fd
  except OSError:
    return os.open(os.devnull, os.O_RDWR)


def _receive_status(conn, block: bool):
  """A number from the server (a pid, then a wait status); False: none yet; None: it closed."""
  conn.setblocking(block)
  data = b""
  try:
    while len(data) < _STATUS.size:
      part = conn.recv(_STATUS.size - len(data))
      if not part:
        return None
      data += part
      conn.setblocking(True)  # The rest of a number that has begun comes at once.
  except BlockingIOError:
    return False
  return _STATUS.unpack(data)[0]


def run(args, *, input=None, capture_output=False, timeout=None, check=False, **kwargs):  # pylint: disable=redefined-builtin
  """subprocess.run on this module's Popen."""
  if capture_output:
    kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
  if input is not None:
    kwargs["stdin"] = subprocess.PIPE
  with Popen(args, **kwargs) as proc:
    try:
      out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
      proc.kill()
      out, err = proc.communicate()
      raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    except BaseException:
      proc.kill()
      raise
  done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
  if check:
    done.check_returncode()
  return done


# --- The server: `python tests/warm.py SOCKET`.

def _serve(path: str):
  """Imports PRELOAD, then forks a process per request until its input ends.

  Returns only in a forked process: its request and standard streams.
  """
  devnull = os.open(os.devnull, os.O_WRONLY)
  saved = os.dup(2)
  os.dup2(devnull, 2)  # TensorFlow's start-up chatter: no process of the tests sees it.
  for name in PRELOAD:
    __import__(name)
  os.dup2(saved, 2)
  # What the imports made stays out of every collection, in the server and in each process it
  # forks: a collection touches every object it tracks, and in a forked process each touch
  # copies a page (1 s more at exit without this).
  gc.collect()
  gc.freeze()
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  listener.bind(path)
  listener.listen(64)
  selector = selectors.DefaultSelector()
  selector.register(listener, selectors.EVENT_READ)
  selector.register(sys.stdin, selectors.EVENT_READ)
  children = {}  # pidfd -> (pid, connection)
  with open(path + ".env.tmp", "w", encoding="utf-8") as f:
    json.dump(dict(os.environ), f)
  os.replace(path + ".env.tmp", path + ".env")  # Whole, once the socket listens: `client` waits.
  sys.stdout.write("ready\n")
  sys.stdout.flush()
  while True:
    for key, _ in selector.select():
      if key.fileobj is sys.stdin:
        return None  # The test process is gone.
      if key.fileobj is listener:
        conn, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while part := conn.recv(1 << 16):  # The client ends its request by shutting its side.
          message += part
        pid = os.fork()
        if pid == 0:
          for pidfd, (_, other) in children.items():
            os.close(pidfd)
            other.close()
          selector.close()
          listener.close()
          conn.close()
          return json.loads(message), fds
        for fd in fds:
          os.close(fd)
        conn.sendall(_STATUS.pack(pid))
        pidfd = os.pidfd_open(pid)
        children[pidfd] = (pid, conn)
        selector.register(pidfd, selectors.EVENT_READ)
      else:
        pid, conn = children.pop(key.fd)
        selector.unregister(key.fd)
        os.close(key.fd)
        status = os.waitpid(pid, 0)[1]
        try:
          conn.sendall(_STATUS.pack(status))
        except OSError:
          pass  # The test stopped waiting.
        conn.close()


def _become(request: dict, fds) -> None:
  """This forked process made the command `request` describes, up to running its code."""
  for target, fd in enumerate(fds):
    os.dup2(fd, target)
  for fd in fds:
    if fd > 2:
      os.close(fd)
  os.chdir(request["cwd"])
  server_path = os.environ.get("PYTHONPATH", "")
  os.environ.clear()
  os.environ.update(request["env"])
  if request["new_session"]:
    os.setsid()
  # sys.path as `python -m`, `-c` or a script would make it here: the working folder, "" or the
  # script's own folder (symbolic links resolved), then PYTHONPATH, then the rest.
  added = [p for p in server_path.split(os.pathsep) if p]
  base = [p for p in sys.path[1:] if p not in added]
  wanted = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
  first = {"-m": os.getcwd(), "-c": ""}.get(
      request["option"], os.path.dirname(os.path.realpath(request["target"])))
  sys.path[:] = [first] + wanted + base
  sys.argv = [request["target"] if request["option"] == SCRIPT else request["option"],
              *request["argv"]]
  _streams(bool(request["env"].get("PYTHONUNBUFFERED")))


def _streams(unbuffered: bool) -> None:
  """stdout and stderr made as an interpreter's start makes them, PYTHONUNBUFFERED or not.

  The server's own are those of its start, whatever the command's variable says.
  """
  for name in ("stdout", "stderr"):
    stream = getattr(sys, name)
    stream.flush()
    raw = io.FileIO(stream.fileno(), "w", closefd=False)
    setattr(sys, name, io.TextIOWrapper(
        raw if unbuffered else io.BufferedWriter(raw), encoding=stream.encoding,
        errors=stream.errors, write_through=unbuffered,
        line_buffering=not unbuffered and (name == "stderr" or raw.isatty())))


def _fork_own_commands(request: dict) -> None:
  """A forked command's own `python ...` processes fork from the servers its test had.

  audioclf launch starts one `python -m audioclf.commands.train` per task,
  and migrate --report a legacy-stack Python: each would spend 3-5 s
  importing TensorFlow, and a test of a cluster starts several. Every other
  process it starts stays a plain one (`_request`).
  """
  _SERVERS.clear()
  _SERVERS.update({python: _Remote(path) for python, path in request["servers"].items()})
  _SERVERS[sys.executable] = _Remote(request["socket"])
  subprocess.Popen = Popen


def socket_path(python: Optional[str] = None) -> Optional[str]:
  """The socket of `python`'s server (default this one's), once serving: SOCKET_ENV for programs.

  None where forking is off or the server did not start.
  """
  server = start(python)
  return server.path if server is not None and server.ready() else None


# How long `client` waits for a server still importing before it runs its command plainly.
CLIENT_WAIT_S = 60.0


def client(argv) -> int:
  """`python tests/warm.py --client ARGS...`: `python ARGS...`, forked from SOCKET_ENV's server.

  For a program that runs `python` itself (tools/check_docs.py, given this as
  a venv's python): its signals are passed on, its status is the command's.
  A server that is not serving within CLIENT_WAIT_S (still importing, or
  failed): the command runs as a plain process, as `_request` would.
  """
  path = os.environ[SOCKET_ENV]
  deadline = time.monotonic() + CLIENT_WAIT_S
  while not os.path.exists(path + ".env"):
    if time.monotonic() > deadline:
      os.execv(sys.executable, [sys.executable, *argv])
    time.sleep(0.05)
  _SERVERS[sys.executable] = _Remote(path)
  proc = Popen([sys.executable, *argv])
  for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, lambda number, _: proc.send_signal(number))
  code = proc.wait()
  if code < 0:  # Killed by a signal: so is this process.
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
  return code


def _main() -> None:
  if sys.argv[1] == "--client":
    sys.exit(client(sys.argv[2:]))
  served = _serve(sys.argv[1])
  if served is None:
    return
  request, fds = served
  _become(request, fds)
  _fork_own_commands(request)
  if request["option"] == "-m":
    import runpy  # pylint: disable=import-outside-toplevel
    sys.argv[0] = request["target"]
    runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
    return
  if request["option"] == SCRIPT:
    import runpy  # pylint: disable=import-outside-toplevel
    runpy.run_path(request["target"], run_name="__main__")
    return
  import types  # pylint: disable=import-outside-toplevel
  main = types.ModuleType("__main__")
  sys.modules["__main__"] = main
  exec(compile(request["target"], "<string>", "exec"), main.__dict__)  # pylint: disable=exec-used


if __name__ == "__main__":
  _main()
