"""The benchmarks in tools/ print what they promise and write their pages (tools/measured.py).

The fast tests feed each benchmark's summary, report and page writer known
figures and read back what it wrote (into a temporary folder: $AUDIOCLF_MEASURED_DIR);
the slow ones run tools/bench_train.py, tools/bench_stacks.py, tools/bench_input.py,
tools/bench_augment.py and tools/gpu_check.py end to end at smoke size.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import measured  # noqa: E402  pylint: disable=wrong-import-position

LOAD = "1.0 / 1.0 / 1.0 (1 / 5 / 15 min)"


def _run(args, timeout=300, **env):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env)
  return warm.run([sys.executable, *args], cwd=ROOT, env=env,
                  capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def pages(tmp_path, monkeypatch):
  """Where measured.write writes during the test (never docs/measured); sys.argv a tool's own."""
  folder = tmp_path / "measured"
  monkeypatch.setenv(measured.DIR_ENV, str(folder))
  monkeypatch.setattr(sys, "argv", [str(ROOT / "tools" / "bench.py"), "--measured"])
  return folder


def _page(folder: Path, name: str) -> tuple[str, dict]:
  """The page `name` in `folder`, and its JSON."""
  return (folder / f"{name}.md").read_text(), json.loads((folder / f"{name}.json").read_text())


def test_measured_writes_where_the_environment_says_with_the_command_line(pages):
  path = measured.write("bench_x", "A title", measured.command(), "a body\n", {"figure": 1.5},
                        load_before=LOAD)
  assert Path(path) == pages / "bench_x.md"
  page, record = _page(pages, "bench_x")
  assert page.startswith("# A title\n")
  assert "by `python tools/bench.py --measured`" in page
  assert f"load average: {LOAD} at the start" in page
  assert page.endswith("a body\n")
  assert record["figure"] == 1.5 and record["command"] == "python tools/bench.py --measured"


def test_bench_input_writes_a_page_per_run_kind_and_stack():
  import bench_input
  pages = {(each, stack): bench_input.measured_page(each, stack)[0]
           for each in (False, True) for stack in ("current", "legacy")}
  assert pages == {(False, "current"): "bench_input", (True, "current"): "bench_input_augment",
                   (False, "legacy"): "bench_input_legacy",
                   (True, "legacy"): "bench_input_augment_legacy"}


def test_bench_input_verdicts_are_those_of_the_values_they_print():
  """Each round's ratio is taken within the round; the verdict reads their median, as printed."""
  import bench_input

  def rounds(*rates):
    return [bench_input.Run(0.1, rate, 100.0) for rate in rates]

  # The cold pass ahead in two rounds of three (1.25, 1.09, 0.33: median 1.09); the medians apart
  # (5.0 against 5.5) say otherwise, as a machine whose load drifts between rounds makes them.
  _, targets = bench_input.summarize("wav", {"audioclf_cold": rounds(5.0, 6.0, 2.0),
                                             "best_practice": rounds(4.0, 5.5, 6.0)})
  (cold,) = targets
  assert cold["target"] == "cold_vs_best" and round(cold["value"], 3) == 1.091 and cold["pass"]


def test_bench_train_page_holds_its_table_verdicts_and_rows(pages):
  import bench_train

  def runs(steps_per_s, stall=0.0):
    return [bench_train.Run(steps_per_s, stall, 6, 0.5, [0.1] * 8)]

  rows, targets = bench_train.summarize("wav", {
      ("keras", "best_practice"): runs(4.0, 0.5), ("keras", "audioclf_cold"): runs(5.0, 0.2),
      ("keras", "audioclf_warm"): runs(9.8), ("keras", "limit"): runs(10.0),
      ("keras", "limit_unmetered"): runs(12.5)})
  verdicts = {t["target"]: (round(t["value"], 3), t["pass"]) for t in targets}
  assert verdicts == {"warm_vs_limit[keras]": (0.98, True), "cold_vs_best[keras]": (1.25, True),
                      "meter_cost[keras]": (0.8, False)}
  text = bench_train.report(rows, targets, "the heading")
  path = bench_train.write_page(text, rows, targets, LOAD, steps=8)
  assert Path(path) == pages / "bench_train.md"
  page, record = _page(pages, "bench_train")
  assert "the heading\n```\nworkload  engine" in page
  assert "wav       keras      audioclf_warm       9.80  0.000     0.980      6" in page
  assert "wav       keras      limit_unmetered    12.50      -     1.250      6" in page
  assert "PASS  wav   warm_vs_limit[keras]   0.980 (want >= 0.95)" in page
  assert "MISS  wav   meter_cost[keras]      0.800" in page
  assert record["steps"] == 8 and record["targets"] == json.loads(json.dumps(targets))
  assert [r["pipeline"] for r in record["rows"]] == [r["pipeline"] for r in rows]


def _stack_round(steps_per_s, cpu_ms, stack):
  return {"tensorflow": f"TF-{stack}", "keras": f"Keras-{stack}", "steps_per_s": steps_per_s,
          "cpu_ms_per_step": cpu_ms}


def test_bench_stacks_page_holds_the_rounds_the_ratio_and_its_verdict(pages):
  import bench_stacks
  record = bench_stacks.summarize(
      {"current": [_stack_round(9.0, 100.0, "c"), _stack_round(8.0, 110.0, "c"),
                   _stack_round(5.0, 90.0, "c")],
       "legacy": [_stack_round(10.0, 120.0, "l"), _stack_round(10.0, 110.0, "l"),
                  _stack_round(10.0, 90.0, "l")]}, steps=40)
  assert record["round_ratios"] == [0.9, 0.8, 0.5]
  assert record["ratio_current_to_legacy"] == 0.8 and record["pass"] is False
  assert record["stacks"]["current"]["steps_per_s"] == 8.0
  assert record["cpu_ratio_legacy_to_current"] == 1.0
  text = bench_stacks.report(record, "the heading")
  bench_stacks.write_page(text, record, LOAD)
  page, written = _page(pages, "bench_stacks")
  assert "    2              8.00             10.00           0.800" in page
  assert "median              8.00             10.00           0.800" in page
  assert "MISS  keras3_vs_keras2 0.800 (want >= 0.90" in page
  assert "current: TF TF-c, Keras Keras-c, 100 CPU ms a step (median)" in page
  assert written["round_ratios"] == [0.9, 0.8, 0.5] and written["steps"] == 40


def test_bench_stacks_with_one_stack_says_the_ratio_needs_both():
  import bench_stacks
  record = bench_stacks.summarize({"current": [_stack_round(9.0, 100.0, "c")]})
  assert record["pass"] is None and record["ratio_current_to_legacy"] is None
  text = bench_stacks.report(record, "the heading")
  assert "ratio: needs both stacks" in text and "PASS" not in text and "MISS" not in text


def test_bench_service_page_holds_each_input_and_the_steps_cap(pages):
  import bench_service
  rows = [{"input": "in process", "workers": None, "examples_per_s_stepped": 2000.4,
           "examples_per_s_free": 9000.0},
          {"input": "service, 1 worker", "workers": 1, "examples_per_s_stepped": 1500.0,
           "examples_per_s_free": 3000.0}]
  text = bench_service.report(rows, step_ms=30.0, batch_size=64, cores=2)
  bench_service.write_page(text, {"rows": rows, "step_ms": 30.0}, LOAD)
  page, record = _page(pages, "bench_service")
  assert "input                    behind a 30 ms step     no step   examples/s" in page
  assert "in process                             2,000       9,000" in page
  assert "service, 1 worker                      1,500       3,000" in page
  assert "(a step of 30 ms caps it at 2,133; 2 cores shared by trainer and workers)" in page
  assert record["rows"] == rows


def test_bench_tune_memory_pages_hold_each_trials_rss_and_the_growth(pages):
  import bench_tune_memory
  rows = [{"trial": f"{i:02d}", "status": "COMPLETED", "model_args": {"width": 16},
           "batch_size": 16, "seconds": 1.0, "rss_mb": rss}
          for i, rss in enumerate((500, 600, 650, 651, 652, 653))]
  result = bench_tune_memory.summarize(rows, 400.0, False, 12.0)
  assert (result["rss_after_first_mb"], result["rss_after_half_mb"],
          result["rss_after_last_mb"]) == (500, 650, 653)
  assert result["growth_second_half_mb"] == 3
  assert result["slope_second_half_mb_per_trial"] == pytest.approx(1.0)
  bench_tune_memory.write_page(bench_tune_memory.report(rows, result), result, LOAD)
  kept = bench_tune_memory.summarize(rows, 400.0, True, 12.0)
  bench_tune_memory.write_page(bench_tune_memory.report(rows, kept), kept, LOAD)
  page, record = _page(pages, "bench_tune_memory")
  assert "RSS before the search (TensorFlow imported): 400 MB" in page
  assert "   05  COMPLETED  width=16           16      1.0      653" in page
  assert "RSS after trials 1 / 3 / 6: 500 / 650 / 653 MB; second half: +1.00 MB a trial\n" in page
  assert record == json.loads(json.dumps({**record, **result}))
  page, record = _page(pages, "bench_tune_memory_keep_trial_graphs")
  assert "trial graphs kept" in page and "+1.00 MB a trial (--keep_trial_graphs)" in page
  assert record["keep_trial_graphs"] is True


def test_bench_models_page_holds_its_table(pages):
  import bench_models
  rows = [{"model": "cnn", "args": "width=16", "parameters": 12345, "macs": 2.5e6,
           "speed": {"current": {"steps_per_s": 3.25}}, "test_accuracy": 0.9,
           "held_out_accuracy": None}]
  text = bench_models.table(rows, ["current", "legacy"])
  bench_models.write_page(text, {"rows": rows, "rounds": 2, "steps": 40, "train_steps": 600},
                          LOAD)
  page, record = _page(pages, "bench_models")
  assert "| cnn | `width=16` | 12,345 | 2.5M | 3.25 | - | 0.900 | - |" in page
  assert "median of 2 interleaved rounds of 40 steps per stack. Accuracy: 600 steps" in page
  assert "earlier run" not in page
  assert record["rows"] == rows
  rows[0]["trained_before"] = "2026-12-01 03:50 UTC"
  bench_models.write_page(text, {"rows": rows, "rounds": 2, "steps": 40, "train_steps": 600},
                          LOAD)
  assert "trained by an earlier run of this command (2026-12-01 03:50 UTC;" in _page(
      pages, "bench_models")[0]


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
  plan = ["tools/bench_augment.py", "--plan", f"--demo_flagfile={demo}", f"--preset={preset}"]
  proc = _run(plan + ["--nostandard_rows"])
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
  # By default, a row too for each augmentation the preset leaves off, at its usual settings;
  # the preset's own keep the preset's settings, and noise (the demo's own) still has none.
  proc = _run(plan)
  assert proc.returncode == 0, proc.stderr[-3000:]
  every = json.loads(proc.stdout.strip().splitlines()[-1])
  assert {k: v for k, v in every.items() if k in rows} == rows
  assert every["reverb"] == base + ["--reverb_prob=0.5", "--reverb_rt60=0.2,0.8"]
  assert every["mixup"] == base + ["--mixup_alpha=0.2"]
  assert set(every) - set(rows) == {"tempo", "reverb", "gain", "mixup", "spec_augment",
                                    "balanced", "label_smoothing"}
  proc = _run(plan + ["--rows=baseline,nonsense"])
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


@pytest.mark.slow
def test_gpu_check_without_a_gpu_says_so_and_succeeds():
  import tensorflow as tf
  if tf.config.list_physical_devices("GPU"):
    pytest.skip("this machine has a GPU: gpu_check would train")
  proc = _run(["tools/gpu_check.py"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.startswith("no GPU found: ")


@pytest.mark.slow
@pytest.mark.once  # The measured pages are the current stack's (bench_stacks compares).
def test_bench_train_smoke_prints_the_table_and_writes_json_and_png(tmp_path):
  out = tmp_path / "bench.json"
  png = tmp_path / "bench.png"
  proc = _run(["tools/bench_train.py", "--workloads=wav", "--n_wav=192", "--batch_size=32",
               "--engines=keras", "--pipelines=audioclf_cold,audioclf_warm,limit",
               "--steps=8", "--warmup_steps=2", "--repeats=1", "--simulated_step_ms=5",
               f"--out_dir={tmp_path / 'work'}", f"--json={out}", f"--png={png}", "--measured"],
              AUDIOCLF_MEASURED_DIR=str(tmp_path / "measured"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "warm_vs_limit[keras]" in proc.stdout
  page, record = _page(tmp_path / "measured", "bench_train")
  assert "warm_vs_limit[keras]" in page and "python tools/bench_train.py --workloads=wav" in page
  assert record["rows"] == json.loads(out.read_text())["rows"]
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
@pytest.mark.once  # The measured pages are the current stack's (bench_stacks compares).
def test_bench_input_measures_every_augmentation_against_the_demo_cnn(tmp_path):
  out = tmp_path / "bench.json"
  proc = _run(["tools/bench_input.py", "--workloads=wav", "--n_wav=96", "--batch_size=16",
               "--pipelines=audioclf_warm,audioclf_augment,audioclf_preset", "--repeats=1",
               "--epochs=1",
               "--min_seconds=0", "--short_epochs=0", "--train_steps_timed=3",
               "--augmentations=speed,gain", "--augment_each",
               f"--out_dir={tmp_path / 'work'}", f"--json={out}", "--measured"],
              AUDIOCLF_MEASURED_DIR=str(tmp_path / "measured"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "augment_vs_training" in proc.stdout and "preset_vs_training" in proc.stdout
  import bench_input
  from audioclf.compat import stack
  page, _ = _page(tmp_path / "measured", bench_input.measured_page(True, stack.STACK)[0])
  assert "augment_vs_training" in page
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
