"""tools/bench_train.py, tools/bench_stacks.py and tools/gpu_check.py run end to end and print what they promise."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args, timeout=300):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=timeout)


def test_gpu_check_without_a_gpu_says_so_and_succeeds():
  import tensorflow as tf
  if tf.config.list_physical_devices("GPU"):
    pytest.skip("this machine has a GPU: gpu_check would train")
  proc = _run(["tools/gpu_check.py"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.startswith("no GPU found: ")


@pytest.mark.slow
def test_bench_train_smoke_prints_the_table_and_writes_json_and_png(tmp_path):
  out = tmp_path / "bench.json"
  png = tmp_path / "bench.png"
  proc = _run(["tools/bench_train.py", "--workloads=wav", "--n_wav=192", "--batch_size=32",
               "--engines=keras", "--pipelines=audioclf_cold,audioclf_warm,limit",
               "--steps=8", "--warmup_steps=2", "--repeats=1", "--simulated_step_ms=5",
               f"--out_dir={tmp_path / 'work'}", f"--json={out}", f"--png={png}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "warm_vs_limit[keras]" in proc.stdout
  results = json.loads(out.read_text())
  rows = {(r["engine"], r["pipeline"]): r for r in results["rows"]}
  assert set(rows) == {("keras", p) for p in ("audioclf_cold", "audioclf_warm", "limit")}
  for row in rows.values():
    assert row["measured_steps"] == 6
    assert 0.0 <= row["stall_fraction"] <= 1.0
    assert row["steps_per_s"] > 0
  assert rows[("keras", "limit")]["ratio_to_limit"] == 1.0
  assert png.stat().st_size > 1000


@pytest.mark.slow
def test_bench_stacks_worker_trains_the_real_model_and_writes_its_rate(tmp_path):
  import tensorflow as tf
  from audioclf import compat
  out = tmp_path / "round.json"
  proc = _run(["tools/bench_stacks.py", "--worker", "--model=cnn", "--model_args=width=4", "--nospec_augment",
               "--batch_size=16", "--steps=4", "--warmup_steps=2", "--n_wav=32",
               "--limit_batches=2", f"--out_dir={tmp_path / 'work'}", f"--result={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert result["stack"] == compat.STACK
  assert result["tensorflow"] == tf.__version__
  assert result["measured_steps"] == 2
  assert result["steps_per_s"] > 0
  assert result["cpu_ms_per_step"] > 0


@pytest.mark.slow
def test_bench_input_measures_every_augmentation_against_the_demo_cnn(tmp_path):
  out = tmp_path / "bench.json"
  proc = _run(["tools/bench_input.py", "--workloads=wav", "--n_wav=96", "--batch_size=16",
               "--pipelines=audioclf_warm,audioclf_augment", "--repeats=1", "--epochs=1",
               "--min_seconds=0", "--short_epochs=0", "--train_steps_timed=3",
               "--augmentations=speed,gain", "--augment_each",
               f"--out_dir={tmp_path / 'work'}", f"--json={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "augment_vs_training" in proc.stdout
  results = json.loads(out.read_text())
  rows = {r["pipeline"]: r for r in results["rows"]}
  assert {"audioclf_augment", "augment_speed", "augment_gain", "demo_train"} <= set(rows)
  assert all(rows[p]["ratio_to_demo_train"] > 0 for p in ("augment_speed", "augment_gain"))
  target = next(t for t in results["targets"] if t["target"] == "augment_vs_training")
  assert target["value"] == pytest.approx(
      rows["audioclf_augment"]["examples_per_s"] / rows["demo_train"]["examples_per_s"])
