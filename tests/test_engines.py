"""End-to-end runs of both engines on tiny tone data: the files, metrics and resumes they promise."""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

import audioclf
from audioclf import Params, compat
from audioclf import params as params_lib
from audioclf.data import manifest as manifest_lib
from audioclf.model import model_dir as model_dir_lib
from conftest import ENGINES, TRAIN_STEPS, write_tone_dataset
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _summary_steps(log_dir, tag):
  return [event.step for path in glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
          for event in tf.compat.v1.train.summary_iterator(path)
          for value in event.summary.value if value.tag == tag]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_run_leaves_labels_params_metrics_checkpoints_and_logs(trained, engine):
  params, metrics = trained(engine)
  model_dir = params.model_dir
  with open(os.path.join(model_dir, "labels.txt")) as f:
    assert f.read().splitlines() == list(manifest_lib.load(params).labels) == ["high", "low", "mid"]
  assert Params.from_json(os.path.join(model_dir, "params.json")) == params
  with open(os.path.join(model_dir, "metrics.json")) as f:
    assert json.load(f) == metrics
  latest = tf.train.latest_checkpoint(model_dir)
  assert latest.endswith(f"model.ckpt-{TRAIN_STEPS}")
  assert model_dir_lib.checkpoint_step(latest) == TRAIN_STEPS
  # TensorBoard event files: training, and evaluation at each checkpoint.
  assert glob.glob(os.path.join(model_dir, "**", "events.out.tfevents.*"), recursive=True)
  assert glob.glob(os.path.join(model_dir, "*", "events.out.tfevents.*"))


@pytest.mark.parametrize("engine", ENGINES)
def test_metrics_dict_and_summary_line(trained, engine):
  params, metrics = trained(engine)
  assert metrics["engine"] == engine
  assert metrics["model"] == "cnn"
  assert metrics["steps"] == TRAIN_STEPS
  for key in ("val_loss", "val_accuracy", "test_loss", "test_accuracy", "examples_per_sec",
              "wall_seconds"):
    assert isinstance(metrics[key], float) and metrics[key] > 0, key
  line = model_dir_lib.summary_line(metrics)
  assert "\n" not in line
  assert json.loads(line) == metrics


@pytest.mark.legacy_only
def test_engines_reach_comparable_accuracy(trained):
  # Same seed, same data, same steps, same model: the two engines must agree.
  keras_metrics, estimator_metrics = trained("keras")[1], trained("estimator")[1]
  for metrics in (keras_metrics, estimator_metrics):
    assert metrics["val_accuracy"] > 0.9
    assert metrics["test_accuracy"] > 0.9
  assert abs(keras_metrics["test_loss"] - estimator_metrics["test_loss"]) < 0.25


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_copy_trains_on_and_reads_its_own_checkpoints_never_the_originals(trained, engine,
                                                                              tmp_path):
  # model_to_estimator's Saver lists checkpoints by absolute path: once, training a copy of an
  # Estimator model_dir deleted the original's oldest checkpoints as its own.
  params, _ = trained(engine)
  before = sorted(os.listdir(params.model_dir))
  copy = str(tmp_path / "copy")
  shutil.copytree(params.model_dir, copy)
  assert os.path.dirname(model_dir_lib.latest_checkpoint(copy)) == copy
  audioclf.train(params.replace(model_dir=copy, train_steps=TRAIN_STEPS + 4 * 10,
                                eval_every_steps=10))
  assert sorted(os.listdir(params.model_dir)) == before
  state = tf.train.get_checkpoint_state(copy)
  assert len(state.all_model_checkpoint_paths) == model_dir_lib.KEEP_CHECKPOINTS
  assert all(os.path.dirname(p) == copy for p in state.all_model_checkpoint_paths)
  assert model_dir_lib.latest_checkpoint(copy) == os.path.join(
      copy, f"{model_dir_lib.CHECKPOINT_NAME}-{TRAIN_STEPS + 40}")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_resume_continues_the_step_count(trained, engine, tmp_path):
  params, metrics = trained(engine)
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  more = params.replace(model_dir=model_dir, train_steps=TRAIN_STEPS + 10)
  resumed = audioclf.train(more)
  assert resumed["steps"] == TRAIN_STEPS + 10
  assert model_dir_lib.checkpoint_step(tf.train.latest_checkpoint(model_dir)) == TRAIN_STEPS + 10
  # Ten steps from scratch stay near chance: this run started from the trained weights.
  assert resumed["val_accuracy"] > 0.9
  assert Params.from_json(os.path.join(model_dir, "params.json")).train_steps == TRAIN_STEPS + 10
  if engine == "keras":
    # fit restarts Keras' batch counter; the summaries must carry on at the global step.
    assert max(_summary_steps(os.path.join(model_dir, "train"), "batch_loss")) == TRAIN_STEPS + 10
  # At train_steps already: nothing trains, not even one step, and metrics are still reported.
  again = audioclf.train(more)
  assert again["steps"] == TRAIN_STEPS + 10
  assert again["input_stall_fraction"] is None  # No step ran, so none was measured.
  assert again["val_accuracy"] == pytest.approx(resumed["val_accuracy"])


@pytest.mark.legacy_only
def test_other_engines_model_dir_is_refused(trained, tmp_path):
  params, _ = trained("keras")
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  with pytest.raises(model_dir_lib.ModelDirError, match=r"trained with --engine=keras"):
    audioclf.train(params.replace(model_dir=model_dir, engine="estimator"))


def test_other_labels_or_architecture_are_refused(trained, tmp_path):
  params, _ = trained("keras")
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  other = write_tone_dataset(tmp_path / "other", labels=("bass", "treble"))
  with pytest.raises(model_dir_lib.ModelDirError, match=r"labels \['high', 'low', 'mid'\]"):
    audioclf.train(params.replace(model_dir=model_dir, data_dir=other))
  with pytest.raises(model_dir_lib.ModelDirError,
                     match=r"--model_args=width=8 \(was\) vs width=16 \(now\)"):
    audioclf.train(params.replace(model_dir=model_dir, model_args={"width": 16}))


def test_checkpoints_without_params_are_refused(trained, tmp_path):
  params, _ = trained("keras")
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  os.remove(os.path.join(model_dir, "params.json"))
  with pytest.raises(model_dir_lib.ModelDirError, match="no params.json"):
    audioclf.train(params.replace(model_dir=model_dir))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_prefetch_to_a_device_trains_as_well(trained, engine, tmp_path):
  """The device-prefetch path (OneDeviceStrategy / prefetch_to_device), here to the CPU."""
  params = trained(engine)[0].replace(prefetch_device="/cpu:0", model_dir=str(tmp_path / "m"))
  metrics = audioclf.train(params)
  assert metrics["steps"] == TRAIN_STEPS
  assert metrics["test_accuracy"] > 0.9
  assert 0 <= metrics["input_stall_fraction"] < 1
  assert abs(metrics["test_loss"] - trained(engine)[1]["test_loss"]) < 0.25


def test_prefetch_device_must_name_a_device():
  with pytest.raises(ValueError, match="--prefetch_device=gpu0: must be auto, none or a device"):
    Params(prefetch_device="gpu0").validate()


def test_unknown_model_or_engine_fails_before_touching_data(tmp_path):
  params = Params(data_dir=str(tmp_path / "missing"), model_dir=str(tmp_path / "m"))
  with pytest.raises(ValueError, match=r"--model=vgg: no model is registered under that name"):
    audioclf.train(params.replace(model="vgg"))
  with pytest.raises(ValueError, match=r"--model_args=depth=2: cnn takes no argument 'depth'"):
    audioclf.train(params.replace(model_args={"depth": 2}))
  with pytest.raises(ValueError, match=r"--engine=jax: must be one of keras, estimator"):
    audioclf.train(params.replace(engine="jax"))
  assert not os.path.exists(tmp_path / "m")


@pytest.mark.current_only
def test_estimator_engine_says_which_stack_it_needs(tmp_path):
  params = Params(data_dir=str(tmp_path / "missing"), model_dir=str(tmp_path / "m"),
                  engine="estimator")
  with pytest.raises(compat.StackError, match=r"needs the legacy stack \(Python 3.11, TensorFlow "
                     r"2.15.*AUDIOCLF_STACK=legacy tools/demo.sh.*--engine=keras"):
    audioclf.train(params)
  assert not os.path.exists(tmp_path / "m")  # Refused before the data or model_dir is touched.


@pytest.mark.slow
@pytest.mark.current_only
def test_estimator_engine_on_the_current_stack_ends_the_command_in_one_line(tmp_path):
  proc = warm.run(
      [sys.executable, "-m", "audioclf", "train", "--engine=estimator",
       f"--data_dir={tmp_path / 'missing'}", f"--model_dir={tmp_path / 'm'}"],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env={k: v for k, v in os.environ.items() if k != "AUDIOCLF_TRACEBACK"})
  assert proc.returncode == 1, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("audioclf: error: --engine=estimator needs tf.estimator"), last
  assert "AUDIOCLF_STACK=legacy tools/demo.sh" in last and "Traceback" not in proc.stderr


def _as_other_stack(model_dir):
  """Rewrites model_dir's stack record as the other stack's (as if that stack had written it)."""
  path = os.path.join(model_dir, "params.json")
  with open(path) as f:
    record = json.load(f)
  record["stack"] = ({"name": "legacy", "tensorflow": "2.15", "keras": 2} if compat.KERAS3 else
                     {"name": "current", "tensorflow": "2.21", "keras": 3})
  with open(path, "w") as f:
    json.dump(record, f)


def test_params_json_records_the_stack(trained, tmp_path):
  params, _ = trained("keras")
  with open(os.path.join(params.model_dir, "params.json")) as f:
    stack = json.load(f)["stack"]
  assert stack == model_dir_lib.written_by(params.model_dir) == compat.stack_record()
  assert stack["keras"] == (3 if compat.KERAS3 else 2)
  assert stack["tensorflow"] == ".".join(tf.__version__.split(".")[:2])
  # A params.json from before the record: the checkpoint's keys tell its Keras.
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  with open(os.path.join(model_dir, "params.json")) as f:
    record = json.load(f)
  del record["stack"]
  with open(os.path.join(model_dir, "params.json"), "w") as f:
    json.dump(record, f)
  assert model_dir_lib.written_by(model_dir)["keras"] == stack["keras"]


def test_other_stacks_model_dir_names_what_to_run(trained, tmp_path):
  from audioclf.deploy.evaluate import evaluate  # pylint: disable=g-import-not-at-top
  from audioclf.deploy.export import export  # pylint: disable=g-import-not-at-top
  params, _ = trained("keras")
  model_dir = str(tmp_path / "model")
  shutil.copytree(params.model_dir, model_dir)
  _as_other_stack(model_dir)
  want = (rf"written by the legacy stack .*python -m audioclf migrate "
          rf"--from_model_dir={model_dir} --to_model_dir={model_dir}-keras3" if compat.KERAS3 else
          r"written by the current stack .*AUDIOCLF_STACK=current")
  for command in (lambda: audioclf.train(params.replace(model_dir=model_dir, train_steps=50)),
                  lambda: evaluate(model_dir), lambda: export(model_dir)):
    with pytest.raises(model_dir_lib.ModelDirError, match=want):
      command()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_cli_trains_from_a_flagfile_quietly_and_prints_json_last(tone_params, tmp_path, engine):
  # By default only audioclf's own lines reach stderr (AUDIOCLF_VERBOSE=1 brings
  # TensorFlow's back: tests/test_cluster_estimator.py, whose cluster runs verbose).
  flagfile = str(tmp_path / "tiny.flags")
  params = tone_params.replace(model="ds_cnn", train_steps=6, eval_every_steps=3,
                               model_dir=str(tmp_path / "model"))
  params_lib.to_flagfile(params, flagfile, header="python -m audioclf train --flagfile=tiny.flags")

  proc = warm.run(
      [sys.executable, "-m", "audioclf", "train", f"--flagfile={flagfile}", f"--engine={engine}",
       f"--model_dir={params.model_dir}"],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["engine"] == engine
  assert summary["model"] == "ds_cnn"
  assert summary["steps"] == 6
  with open(os.path.join(params.model_dir, "metrics.json")) as f:
    assert json.load(f) == summary
  chatter = [line for line in proc.stderr.splitlines() if not line.startswith("audioclf: ")]
  assert not chatter, proc.stderr[-3000:]
