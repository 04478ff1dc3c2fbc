"""audioclf listen: the detector's rules, and the command on a file, on stdin, and stopped by a closed pipe or Ctrl-C."""

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

import audioclf
from audioclf import Params
from audioclf.streaming import detector as detector_lib
from conftest import tone, write_tone_dataset
from test_your_model import ROOT, _env
import warm


def detector(threshold=0.5, smoothing=1, refractory=0, warmup=0, labels="all"):
  return detector_lib.Detector(["_silence_", "yes", "no"], threshold, smoothing, refractory,
                               hop_seconds=0.08, warmup_hops=warmup, refractory_labels=labels)


def test_a_label_fires_where_its_smoothed_probability_reaches_the_threshold():
  found = detector(smoothing=2)
  fired = [found.update(p) for p in ([0, 0.4, 0.6], [0, 0.8, 0.2], [0, 0.4, 0.6], [0, 0.3, 0.7])]
  assert [[(d.time, d.label, d.score) for d in hop] for hop in fired] == [
      [(0.08, "no", 0.6)], [(0.16, "yes", 0.6)], [(0.24, "yes", 0.6)], [(0.32, "no", 0.65)]]


def test_the_refractory_period_and_warmup_silence_a_label_and_silence_never_fires():
  found = detector(refractory=2, warmup=1)
  fired = [[d.label for d in found.update([1.0, 0.9, 0.0])] for _ in range(6)]
  assert fired == [[], ["yes"], [], [], ["yes"], []]


@pytest.mark.parametrize("labels, fired", [
    ("all", [["yes"], [], [], ["no"]]),  # The word's tail, heard as "no", rests with it.
    ("each", [["yes"], ["no"], [], []]),
])
def test_after_a_detection_every_label_rests_or_only_the_one_that_fired(labels, fired):
  found = detector(refractory=2, labels=labels)
  hops = ([0, 0.9, 0.1], [0, 0.1, 0.9], [0, 0.1, 0.9], [0, 0.1, 0.9])
  assert [[d.label for d in found.update(p)] for p in hops] == fired


def test_a_file_gives_hops_padded_at_the_end_and_paced_on_request(tmp_path):
  import time
  from audioclf.streaming import source
  path = tmp_path / "tone.wav"
  sf.write(path, tone(440.0, 0.5, 16000), 16000)  # 6.25 hops.
  began = time.monotonic()
  hops = list(source.file_hops(str(path), 1280, realtime=True))
  assert time.monotonic() - began >= 6 * 0.08 - 0.01  # The 7th hop is due 0.48 s in.
  assert len(hops) == 7 and all(h.shape == (1280,) for h in hops)
  assert np.all(hops[-1][320:] == 0) and np.any(hops[-1][:320] != 0)


def test_a_pipe_gives_each_hop_as_its_bytes_arrive():
  import io
  from audioclf.streaming import source
  hops = list(source.pcm_hops(io.BytesIO(pcm(0.2)), 1280))
  assert len(hops) == 3 and np.all(hops[-1][640:] == 0)
  np.testing.assert_allclose(hops[0], tone(440.0, 0.2, 16000)[:1280], atol=1 / 16384)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  """A speech_embedding model_dir trained a few steps on 1 s tones (what it detects is not tested)."""
  root = tmp_path_factory.mktemp("listen")
  params = Params(data_dir=write_tone_dataset(root / "data", labels=("low", "high"),
                                              per_label=6, seconds=1.0),
                  cache_dir=str(root / "cache"), model_dir=str(root / "model"),
                  model="speech_embedding", model_args={"head": "conv", "width": 8},
                  clip_seconds=1.0, batch_size=4, train_steps=2, eval_every_steps=2,
                  validation_percent=25, testing_percent=25, noise_prob=0, seed=0)
  audioclf.train(params)
  return params.model_dir


def pcm(seconds: float) -> bytes:
  return (tone(440.0, seconds, 16000) * 32767).astype("<i2").tobytes()


def listen(model_dir, *flags, **kwargs):
  return warm.Popen([sys.executable, "-m", "audioclf", "listen", f"--model_dir={model_dir}",
                     *flags], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, **kwargs)


@pytest.mark.slow  # A trained model_dir, and a command in a subprocess.
def test_stdin_prints_a_line_per_detection_then_the_summary(model_dir):
  proc = listen(model_dir, "--input=-", "--threshold=0.01", stdin=subprocess.PIPE)
  out, err = (text.decode() for text in proc.communicate(pcm(4.0), timeout=120))
  assert proc.returncode == 0, err[-3000:]
  *detections, summary = [json.loads(line) for line in out.splitlines()]
  summary_hops = -(-64000 // 1280)
  assert summary["hops"] == summary_hops and summary["stopped"] == "end of input"
  assert detections and summary["detections"] == len(detections)
  assert all(d["label"] in ("low", "high") and d["score"] >= 0.01 for d in detections)


@pytest.mark.slow  # A trained model_dir, and a command in a subprocess.
@pytest.mark.parametrize("case", ["odd_bytes", "wrong_rate"])
def test_a_wrong_input_ends_in_one_line(model_dir, tmp_path, case):
  if case == "wrong_rate":
    path = tmp_path / "cd.wav"
    sf.write(path, tone(440.0, 1.0, 44100), 44100)
    proc = listen(model_dir, f"--input={path}", stdin=subprocess.DEVNULL)
    out, err = (text.decode() for text in proc.communicate(timeout=120))
    expected = "44100 Hz, 1 channel(s); listen takes 16 kHz mono"
  else:
    proc = listen(model_dir, "--input=-", stdin=subprocess.PIPE)
    out, err = (text.decode() for text in proc.communicate(pcm(0.5) + b"x", timeout=120))
    expected = "the stream ended after 16001 bytes, an odd number"
  assert proc.returncode == 1
  lines = [line for line in err.splitlines() if line.startswith("audioclf: ")]
  assert len(lines) == 1 and expected in lines[0] and "Traceback" not in err, err[-3000:]


def started(proc) -> dict:
  """Feeds the command 4 s of audio and returns its first detection, read as it prints it."""
  proc.stdin.write(pcm(4.0))
  proc.stdin.flush()
  return json.loads(proc.stdout.readline())


@pytest.mark.slow  # A trained model_dir, and a command in a subprocess.
def test_a_closed_pipe_ends_it_with_the_summary_on_stderr(model_dir):
  proc = listen(model_dir, "--input=-", "--threshold=0.01", "--refractory_seconds=0",
                stdin=subprocess.PIPE)
  try:
    assert started(proc)["label"] in ("low", "high")
    proc.stdout.close()
    try:
      proc.stdin.write(pcm(4.0))
      proc.stdin.close()
    except BrokenPipeError:
      pass  # It stopped reading once it stopped.
    assert proc.wait(timeout=60) == 0
  finally:
    proc.kill()
  err = proc.stderr.read().decode()
  summary = json.loads(err.strip().splitlines()[-1])
  assert summary["stopped"] == "output closed" and "Exception ignored" not in err


@pytest.mark.slow  # A trained model_dir, and a command in a subprocess.
def test_ctrl_c_ends_it_with_the_summary(model_dir):
  proc = listen(model_dir, "--input=-", "--threshold=0.01", stdin=subprocess.PIPE)
  try:
    started(proc)
    proc.send_signal(signal.SIGINT)  # stdin stays open: it is waiting for more audio.
    assert proc.wait(timeout=60) == 0
    summary = json.loads(proc.stdout.read().decode().strip().splitlines()[-1])
  finally:
    proc.kill()
  assert summary["stopped"] == "interrupted" and summary["detections"] >= 1


@pytest.mark.slow  # A trained model_dir, streamed twice.
def test_evaluate_background_keeps_the_threshold_that_meets_the_target(model_dir, tmp_path):
  from audioclf.model import model_dir as model_dir_lib
  from audioclf.streaming import background
  model_dir = shutil.copytree(model_dir, tmp_path / "model")  # The other tests keep the defaults.
  noise = tmp_path / "noise"
  noise.mkdir()
  rng = np.random.default_rng(0)
  sf.write(noise / "hum.wav", 0.05 * rng.standard_normal(16000 * 20).astype(np.float32), 16000)
  params = model_dir_lib.read_params(model_dir)
  report = background.evaluate_background(str(model_dir), str(noise), params, split="train",
                                          target_false_accepts_per_hour=1000.0)
  assert report["background_hours"] == pytest.approx(20 / 3600, abs=1e-4)
  assert report["false_accepts_per_hour"] <= 1000.0 and 0 <= report["false_reject_rate"] <= 1
  assert report["keywords"] > 0 and report["keyword_snr_db"] == [0.0, 20.0]
  kept = detector_lib.read_settings(model_dir)
  assert kept["threshold"] == report["threshold"] and kept["target_false_accepts_per_hour"] == 1000
  assert os.path.getsize(os.path.join(report["report_dir"], background.DET_FILE)) > 0


@pytest.mark.slow  # A trained model_dir, and a command in a subprocess.
def test_export_tflite_streaming_writes_the_model_and_its_settings(model_dir, tmp_path):
  from test_your_model import audioclf as command, last_json
  out = tmp_path / "stream"
  result = last_json(command("export", f"--model_dir={model_dir}", "--format=tflite_streaming",
                             f"--export_dir={out}", "--quantize=none", "--quantize=int8",
                             "--calibration_clips=4"))
  assert result["variants"]["none"]["max_prob_diff"] < 1e-5
  assert result["variants"]["int8"]["max_prob_diff"] < 0.1  # Calibrated on 4 clips end to end.
  assert os.path.getsize(out / "stream_int8.tflite") > 0
  assert os.path.getsize(out / "stream.tflite") > 0 and not (out / "stream_dynamic.tflite").exists()
  sidecar = json.loads((out / "stream.json").read_text())
  assert sidecar["hop_samples"] == 1280 and sidecar["sample_rate"] == 16000
  assert sidecar["labels"] == ["high", "low"] and sidecar["threshold"] == 0.5


@pytest.mark.slow  # A trained model_dir, and a command in a subprocess.
def test_listen_takes_the_threshold_kept_in_the_model_dir(model_dir, tmp_path):
  model_dir = shutil.copytree(model_dir, tmp_path / "model")
  detector_lib.write_settings(str(model_dir), {"threshold": 0.37, "smoothing_hops": 2})
  proc = listen(model_dir, "--input=-", stdin=subprocess.PIPE)
  out, err = proc.communicate(pcm(1.0), timeout=120)
  assert proc.returncode == 0, err[-3000:]
  assert json.loads(out.splitlines()[-1])["threshold"] == 0.37
