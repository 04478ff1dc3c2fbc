"""tools/bench_train.py, tools/bench_stacks.py, tools/bench_augment.py and tools/gpu_check.py run end to end and print what they promise."""

import importlib.util
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


def _tool(name):
  """tools/<name>.py as a module (tools/ is no package: its own imports need it on sys.path)."""
  if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))
  spec = importlib.util.spec_from_file_location(f"tool_{name}", ROOT / "tools" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_bench_augment_plans_a_row_per_augmentation_the_preset_adds(tmp_path):
  demo, preset = tmp_path / "demo.flags", tmp_path / "preset.flags"
  demo.write_text("--model=cnn\n--model_args=width=16\n--noise_prob=0.5\n--train_steps=600\n")
  preset.write_text(f"--flagfile={demo}\n--speed_perturb=0.8,1.25\n--pitch_shift_semitones=-3,3\n"
                    "--pitch_tempo_prob=0.5\n--noise_prob=0.5\n--train_steps=900\n")
  proc = _run(["tools/bench_augment.py", "--plan", f"--demo_flagfile={demo}", f"--preset={preset}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = json.loads(proc.stdout.strip().splitlines()[-1])
  base = [f"--flagfile={demo}"]
  speed, pitch = ["--speed_perturb=0.8,1.25"], ["--pitch_shift_semitones=-3,3",
                                                "--pitch_tempo_prob=0.5"]
  # Noise is the demo's own: no row. The preset trains longer, so it has a row beside `all`,
  # and so has its control: the preset with the demo's augmentations.
  assert rows == {"baseline": base, "speed": base + speed, "pitch": base + pitch,
                  "all": base + speed + pitch,
                  "preset_bare": [f"--flagfile={preset}", "--speed_perturb=1.0,1.0",
                                  "--pitch_shift_semitones=0.0,0.0", "--pitch_tempo_prob=1.0"],
                  "preset": [f"--flagfile={preset}"]}
  proc = _run(["tools/bench_augment.py", "--plan", f"--demo_flagfile={demo}",
               f"--preset={preset}", "--rows=baseline,nonsense"])
  assert proc.returncode != 0 and "nonsense" in proc.stderr


def test_bench_augment_table_shows_the_gap_each_row_closes_and_the_verdict():
  bench = _tool("bench_augment")
  base = ["--flagfile=demo.flags"]
  rows = {"baseline": base, "speed": base + ["--speed_perturb=0.8,1.2"],
          "preset": ["--flagfile=preset.flags"]}
  figures = {"baseline": [(0.99, 0.90, 0.70), (0.99, 0.90, 0.60)],
             "speed": [(0.99, 0.93, 0.80), (1.0, 0.93, 0.80)],
             "preset": [(1.0, 0.96, 0.90), (0.98, 0.96, 0.86)]}
  results = [{"row": row, "seed": seed, "known": k, "held_out": h, "weakest": w, "steps": 600,
              "train_seconds": 60.0}
             for row, runs in figures.items() for seed, (k, h, w) in enumerate(runs)]
  summary = {s["row"]: s for s in bench.summarize(results, rows)}
  assert summary["baseline"]["gap_closed"] == pytest.approx(0.0)
  assert summary["speed"]["gap_closed"] == pytest.approx(1 / 3)
  assert summary["preset"]["gap_closed"] == pytest.approx(2 / 3)
  text = bench.table(list(summary.values()))
  assert "| speed | `--speed_perturb=0.8,1.2` | 600 | 60 | 0.995 (0.990, 1.000) | 0.930" in text
  assert "+33%" in text and "+67%" in text
  assert text.splitlines()[-1].startswith("PASS `preset` closes 67%")
  worse = bench.summarize(results[:4] + [dict(r, held_out=0.92) for r in results[4:]], rows)
  assert bench.table(worse).splitlines()[-1].startswith("MISS `preset` closes 22%")


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
               "--pipelines=audioclf_warm,audioclf_augment,audioclf_preset", "--repeats=1",
               "--epochs=1",
               "--min_seconds=0", "--short_epochs=0", "--train_steps_timed=3",
               "--augmentations=speed,gain", "--augment_each",
               f"--out_dir={tmp_path / 'work'}", f"--json={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "augment_vs_training" in proc.stdout and "preset_vs_training" in proc.stdout
  results = json.loads(out.read_text())
  rows = {r["pipeline"]: r for r in results["rows"]}
  assert {"audioclf_augment", "audioclf_preset", "augment_speed", "augment_gain",
          "demo_train"} <= set(rows)
  assert all(rows[p]["ratio_to_demo_train"] > 0 for p in ("augment_speed", "augment_gain"))
  target = next(t for t in results["targets"] if t["target"] == "augment_vs_training")
  assert target["value"] == pytest.approx(
      rows["audioclf_augment"]["examples_per_s"] / rows["demo_train"]["examples_per_s"])
  target = next(t for t in results["targets"] if t["target"] == "preset_vs_training")
  assert target["value"] == pytest.approx(
      rows["audioclf_preset"]["examples_per_s"] / rows["demo_train"]["examples_per_s"])
