"""python -m audioclf service: the dispatcher and a worker on loopback, started, filled, stopped."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf

from audioclf import params as params_lib
from audioclf.distributed import cluster
from audioclf.data import manifest as manifest_lib
from audioclf.data import pipeline
import warm


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
  proc = warm.Popen([sys.executable, "-m", "audioclf", "service", *args,
                     "--status_every_s=0.5", "--allow_remote_clients"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  return _Lines(proc)


def _stop(lines):
  lines.proc.send_signal(signal.SIGTERM)
  lines.wait_for("stopped", timeout=60)
  assert lines.proc.wait(timeout=60) == 0


@pytest.mark.slow
def test_worker_fills_its_cache_then_registers_and_both_stop_on_sigterm(tone_params, tmp_path):
  params = tone_params.replace(cache_dir=str(tmp_path / "cache"))
  flagfile = str(tmp_path / "data.flags")
  params_lib.to_flagfile(params, flagfile)
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


@pytest.mark.slow
def test_a_worker_needs_a_dispatcher(tone_params):
  run = warm.run([sys.executable, "-m", "audioclf", "service", "worker",
                  f"--data_dir={tone_params.data_dir}", "--allow_remote_clients"],
                 capture_output=True, text=True,
                 timeout=120)
  assert run.returncode != 0 and "--dispatcher=host:port" in run.stderr


def _id_dataset(root, clips=24):
  """clips files of 0.5 s whose every sample is (id + 1) * 100 (PCM16): a window names its clip."""
  for i in range(clips):
    folder = os.path.join(str(root), ("even", "odd")[i % 2])
    os.makedirs(folder, exist_ok=True)
    sf.write(os.path.join(folder, f"clip{i:03d}_nohash_0.wav"),
             np.full(8000, (i + 1) * 100, np.int16), 16000, subtype="PCM_16")
  return str(root)


def _ids(batch):
  return tuple(int(round(v * 32768 / 100)) - 1 for v in batch[0]["waveform"][:, 4000].numpy())


def _servers(flagfiles, port):
  dispatcher = _start("dispatcher", f"--port={port}")
  dispatcher.wait_for("listening")
  workers = []
  for flagfile, worker_port in zip(flagfiles, cluster.free_ports(len(flagfiles))):
    workers.append(_start("worker", f"--dispatcher=127.0.0.1:{port}", f"--port={worker_port}",
                          "--worker_host=127.0.0.1", f"--flagfile={flagfile}"))
  for worker in workers:
    worker.wait_for("registered")
  dispatcher.wait_for(f"{len(workers)} workers")
  return [dispatcher, *workers]


def test_workers_augment_each_batch_as_its_number_says_in_any_order_of_arrival(
    tone_params, monkeypatch, tmp_path):
  # Workers finish batches in no set order: the service stands in here as a
  # reordering of the batches the trainer's own graph would have fetched.
  noise = (np.random.default_rng(0).standard_normal(16000) * 3000).astype(np.int16)
  os.makedirs(tmp_path / "noise")
  sf.write(str(tmp_path / "noise" / "hum.wav"), noise, 16000, subtype="PCM_16")
  params = tone_params.replace(speed_perturb=(0.9, 1.1), gain_db=(-6.0, 6.0), mixup_alpha=0.2,
                               noise_dir=str(tmp_path / "noise"), noise_prob=0.5,
                               data_service="grpc://127.0.0.1:1")
  sent = []

  def reordered(ds, address, job_name=None):
    sent.append(ds)
    return ds.take(12).shuffle(12, seed=3)

  monkeypatch.setattr(pipeline.dataservice, "check_workers", lambda *a: None)
  monkeypatch.setattr(pipeline.dataservice, "distribute", reordered)
  for start in (0, 5):  # From the first step, and resumed at step 5.
    local = pipeline.input_fn(params.replace(data_service=None), "train", seed_offset=start)
    want = [(b[0]["waveform"].numpy(), b[1].numpy()) for b in local.take(12)]
    got = []
    for w, y in pipeline.input_fn(params, "train", seed_offset=start):
      got.append(next(k for k, (ww, yy) in enumerate(want) if np.array_equal(
          ww, w["waveform"].numpy()) and np.array_equal(yy, y.numpy())))
    assert sorted(got) == list(range(12)) and got != sorted(got), (start, got)
  # The workers' graph maps the noise from their cache: it carries none of its samples.
  assert noise[8000:8032].tobytes() not in sent[0]._as_serialized_graph().numpy()


def test_a_listing_holds_the_noise_the_workers_mix_in(tone_params, tmp_path):
  from audioclf.data import service  # pylint: disable=g-import-not-at-top
  os.makedirs(tmp_path / "noise" / "room")
  sf.write(str(tmp_path / "noise" / "room" / "hum.wav"), np.zeros(1600, np.int16), 16000)
  params = tone_params.replace(noise_dir=str(tmp_path / "noise"))
  manifest = manifest_lib.load(params)
  quiet = service.listing(params, manifest)
  noisy = service.listing(params.replace(noise_prob=0.5), manifest)
  assert noisy.startswith(quiet) and noisy[len(quiet):].startswith("noise/room/hum.wav\t")
  assert len(noisy.splitlines()) == len(quiet.splitlines()) + 1


@pytest.mark.slow
def test_two_workers_serve_each_clip_once_per_epoch(tmp_path):
  from audioclf import Params  # pylint: disable=g-import-not-at-top
  params = Params(data_dir=_id_dataset(tmp_path / "data"), cache_dir=str(tmp_path / "cache"),
                  validation_percent=0, testing_percent=0, clip_seconds=0.5,
                  time_shift_seconds=0, batch_size=4)
  flagfile = str(tmp_path / "data.flags")
  params_lib.to_flagfile(params, flagfile)
  port = cluster.free_ports(1)[0]
  servers = _servers([flagfile, flagfile], port)
  try:
    manifest = manifest_lib.load(params)
    epoch = len(manifest.split("train")) // params.batch_size  # 6 batches an epoch.
    # The local pipeline's batch k, by clip ids: what the service must deliver, each once.
    local = {_ids(b): k for k, b in enumerate(pipeline.input_fn(params, "train").take(6 * epoch))}
    served = pipeline.input_fn(params.replace(data_service=f"grpc://127.0.0.1:{port}"), "train")
    seen = []
    for batch in served.take(5 * epoch):
      seen.append(local[_ids(batch)])  # KeyError: a batch the local pipeline never makes.
      if set(range(2 * epoch)) <= set(seen):
        break
    assert len(seen) == len(set(seen)), seen  # No batch twice.
    for e in range(2):  # Each clip once in each of the first two epochs.
      ids = [i for k in seen if e * epoch <= k < (e + 1) * epoch
             for i in next(ids for ids, j in local.items() if j == k)]
      assert sorted(ids) == list(range(len(manifest.split("train")))), (e, seen)
    # Augmented by the workers (the response bank travels in their graph): each
    # batch as the local pipeline's of its number, in whatever order it came.
    augmented = params.replace(speed_perturb=(0.9, 1.1), gain_db=(-6.0, 6.0), reverb_prob=0.5)
    want = [b[0]["waveform"].numpy() for b in pipeline.input_fn(augmented, "train").take(
        10 * epoch)]
    served = pipeline.input_fn(augmented.replace(data_service=f"grpc://127.0.0.1:{port}"), "train")
    for batch in served.take(2 * epoch):
      assert any(np.array_equal(batch[0]["waveform"].numpy(), w) for w in want)
  finally:
    for server in servers:
      if server.proc.poll() is None:
        server.proc.kill()


@pytest.mark.slow
def test_a_worker_with_other_files_is_a_clear_error(tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  from audioclf import Params  # pylint: disable=g-import-not-at-top
  root = _id_dataset(tmp_path / "data", clips=8)
  params = Params(data_dir=root, cache_dir=str(tmp_path / "cache"), validation_percent=0,
                  testing_percent=0, clip_seconds=0.5, batch_size=4)
  pipeline.fill_cache(params, manifest_lib.load(params), splits=("train",))
  # The worker's copy: same names, one file with other samples.
  copy = str(tmp_path / "copy")
  shutil.copytree(root, copy)
  sf.write(os.path.join(copy, "odd", "clip003_nohash_0.wav"), np.zeros(8000, np.int16), 16000,
           subtype="PCM_16")
  flagfile = str(tmp_path / "worker.flags")
  params_lib.to_flagfile(params.replace(data_dir=copy), flagfile)
  port = cluster.free_ports(1)[0]
  servers = _servers([flagfile], port)
  try:
    with pytest.raises(manifest_lib.DataError, match=r"1 files differ.*odd/clip003_nohash_0.wav"):
      pipeline.input_fn(params.replace(data_service=f"grpc://127.0.0.1:{port}"), "train")
  finally:
    for server in servers:
      if server.proc.poll() is None:
        server.proc.kill()


@pytest.mark.slow
def test_sigterm_stops_a_server_between_its_status_lines():
  # Status every 60 s (the default): the signal must not wait for the next one.
  port = cluster.free_ports(1)[0]
  lines = _Lines(warm.Popen([sys.executable, "-m", "audioclf", "service", "dispatcher",
                             f"--port={port}", "--allow_remote_clients"],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True))
  try:
    lines.wait_for("listening")
    start = time.monotonic()
    _stop(lines)
    assert time.monotonic() - start < 30
  finally:
    if lines.proc.poll() is None:
      lines.proc.kill()


@pytest.mark.slow
def test_a_worker_whose_dispatcher_is_gone_still_stops(tone_params, tmp_path):
  flagfile = str(tmp_path / "data.flags")
  params_lib.to_flagfile(tone_params.replace(cache_dir=str(tmp_path / "cache")), flagfile)
  port, worker_port = cluster.free_ports(2)
  dispatcher = _start("dispatcher", f"--port={port}")
  worker = None
  try:
    dispatcher.wait_for("listening")
    worker = _start("worker", f"--dispatcher=127.0.0.1:{port}", f"--port={worker_port}",
                    "--worker_host=127.0.0.1", f"--flagfile={flagfile}")
    worker.wait_for("registered")
    dispatcher.proc.kill()
    dispatcher.proc.wait(timeout=30)
    start = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=60) == 0
    assert time.monotonic() - start < 40
  finally:
    for lines in (worker, dispatcher):
      if lines is not None and lines.proc.poll() is None:
        lines.proc.kill()


def _listening(port):
  """The local addresses (hex, as /proc/net/tcp* write them) that listen on `port` on this host."""
  found = []
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
      rows = open(table).read().splitlines()[1:]
    except OSError:
      continue
    for row in rows:
      local, state = row.split()[1], row.split()[3]
      address, hex_port = local.rsplit(":", 1)
      if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN.
        found.append(address)
  return found


@pytest.mark.slow
def test_neither_server_starts_unless_told_that_any_host_may_reach_it(tone_params, tmp_path):
  port = cluster.free_ports(1)[0]
  cache_dir = tmp_path / "cache"
  for role, args in (("dispatcher", []), ("worker", [f"--dispatcher=127.0.0.1:{port}",
                                                     f"--data_dir={tone_params.data_dir}",
                                                     f"--cache_dir={cache_dir}"])):
    run = warm.run([sys.executable, "-m", "audioclf", "service", role, f"--port={port}",
                    *args], capture_output=True, text=True, timeout=120)
    last = run.stderr.rstrip().splitlines()[-1]
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert last.startswith(f"audioclf: error: a tf.data service {role} starts only with "
                           "--allow_remote_clients"), last
    assert "no authentication" in last and "any file" in last
  assert not _listening(port)
  assert not cache_dir.exists()  # The worker refused before it filled anything.


@pytest.mark.slow
def test_a_server_says_whom_it_serves_and_listens_on_every_interface():
  # What TensorFlow binds, whatever it is asked: the reason for the flag. Were
  # a server ever to listen on loopback only, this fails, and the default can change.
  port = cluster.free_ports(1)[0]
  dispatcher = _start("dispatcher", f"--port={port}")
  try:
    dispatcher.wait_for("listening")
    assert set(_listening(port)) <= {"00000000", "0" * 32} and _listening(port)
  finally:
    dispatcher.proc.send_signal(signal.SIGTERM)
    _, stderr = dispatcher.proc.communicate(timeout=60)
  assert "listens on every network interface (port " + str(port) + ") with no authentication" \
      in stderr, stderr[-3000:]




@pytest.mark.slow
def test_training_from_a_dispatcher_that_is_not_there_is_a_clear_error(tmp_path):
  # A tf.data service client would wait for it without end.
  from test_cli import assert_one_error_line, run_command
  from audioclf import Params  # pylint: disable=g-import-not-at-top
  params = Params(data_dir=_id_dataset(tmp_path / "data", clips=16), validation_percent=25,
                  cache_dir=str(tmp_path / "cache"), testing_percent=0, clip_seconds=0.5,
                  batch_size=4, model_dir=str(tmp_path / "model"), train_steps=2)
  pipeline.fill_cache(params, manifest_lib.load(params))
  flagfile = str(tmp_path / "run.flags")
  params_lib.to_flagfile(params, flagfile)
  address = f"grpc://127.0.0.1:{cluster.free_ports(1)[0]}"
  rc, err = run_command("train", f"--flagfile={flagfile}", f"--data_service={address}")
  assert_one_error_line(rc, err, f"--data_service={address}: no tf.data service dispatcher "
                        "answers there (Connection refused); start one with python -m audioclf "
                        "service dispatcher --allow_remote_clients")
