"""Keras under tf.distribute: MultiWorkerMirroredStrategy on loopback, MirroredStrategy on logical CPUs."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow as tf

from audioclf import params as params_lib
from audioclf.model import model_dir as model_dir_lib
from audioclf.commands import cli
from audioclf.data.manifest import DataError
from audioclf.engines import keras_engine
from audioclf.engines.keras_engine import evaluation_batching
import warm


@pytest.mark.parametrize("clips", [1, 2, 3, 4, 5, 9, 13, 17, 31, 64, 100])
@pytest.mark.parametrize("pipelines,replicas", [(1, 1), (2, 2), (3, 3), (1, 2), (1, 3), (2, 4)])
@pytest.mark.parametrize("batch_size", [1, 4, 8, 12])
def test_evaluation_batching_gives_every_replica_a_batch_and_every_clip_once(
    clips, pipelines, replicas, batch_size):
  if clips < replicas:
    with pytest.raises(DataError, match="cannot be evaluated") as error:
      evaluation_batching(clips, pipelines, replicas, batch_size)
    assert cli.user_error(error.value).startswith("a split of")  # One line, no traceback.
    return
  local = replicas // pipelines

  def batches(batch):  # Each pipeline's batch sizes over its stride of the split.
    return [[min(batch, share - i) for i in range(0, share, batch)]
            for share in (len(range(p, clips, pipelines)) for p in range(pipelines))]

  def even(sizes):
    return len({len(s) for s in sizes}) == 1 and len(sizes[0]) % local == 0

  try:
    batch, steps = evaluation_batching(clips, pipelines, replicas, batch_size)
  except ValueError as e:
    # Only where no batch size at all would do (several replicas to a pipeline).
    assert "no replica batch" in str(e)
    assert not any(even(batches(b)) for b in range(1, clips + 1))
    return
  sizes = batches(batch)
  # A pipeline's batches go to its replicas in turn: `steps` rounds, none empty.
  assert even(sizes) and len(sizes[0]) == steps * local and min(map(min, sizes)) > 0
  assert sum(map(sum, sizes)) == clips  # Every clip once.
  if batch > max(1, batch_size // replicas):  # Larger only where no smaller one does.
    assert not any(even(batches(b)) for b in range(1, batch))


def _flagfile(params, tmp_path):
  path = str(tmp_path / "run.flags")
  params_lib.to_flagfile(params, path)
  return path


def _launch(flagfile, workers=2, **kwargs):
  return warm.Popen([sys.executable, "-m", "audioclf", "launch", f"--workers={workers}", "--",
                     f"--flagfile={flagfile}"], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, **kwargs)


def _evaluate(model_dir, split):
  run = warm.run([sys.executable, "-m", "audioclf", "evaluate", f"--model_dir={model_dir}",
                  f"--split={split}"], capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-2000:]
  return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_two_workers_train_one_model_evaluate_exactly_and_resume_after_a_kill(tone_params,
                                                                              tmp_path):
  # batch 8 over 2 workers: 4 a replica; the validation split (4 clips) and
  # the test split (11) do not divide into whole global batches.
  params = tone_params.replace(engine="keras", model_dir=str(tmp_path / "model"), train_steps=40,
                               eval_every_steps=20, log_every_steps=10)
  flagfile = _flagfile(params, tmp_path)
  # First run: killed, every worker with it, once the checkpoint of step 20 is there (listed
  # in model_dir's checkpoint file, as a resumed run finds it).
  first = _launch(flagfile)
  deadline = time.monotonic() + 300
  while model_dir_lib.own_latest_checkpoint(params.model_dir) is None:
    assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
    time.sleep(0.2)
  first.send_signal(signal.SIGTERM)
  _, err = first.communicate(timeout=120)
  assert first.returncode == 128 + signal.SIGTERM, err[-3000:]

  second = _launch(flagfile)
  out, err = second.communicate(timeout=420)
  assert second.returncode == 0, err[-3000:]
  summary = json.loads(out.strip().splitlines()[-1])
  assert summary["task"] == "worker:0" and summary["workers"] == 2
  assert summary["steps"] == 40  # Continued from the checkpoint the kill left.
  resumed = re.search(r"resuming from \S*model\.ckpt-(\d+)", err)
  assert resumed and int(resumed.group(1)) < 40, err[-3000:]  # The kill stopped the training.
  assert model_dir_lib.checkpoint_step(tf.train.latest_checkpoint(params.model_dir)) == 40
  assert summary["val_accuracy"] > 0.9 and summary["test_accuracy"] > 0.9
  with open(os.path.join(params.model_dir, "metrics.json")) as f:
    assert json.load(f) == summary
  # Only the chief wrote model_dir: one writer of TensorBoard events per run.
  for folder in ("train", "validation"):
    writers = {os.path.basename(p).split(".")[-4] for p in
               glob.glob(os.path.join(params.model_dir, folder, "events.out.tfevents.*"))}
    assert len(writers) <= 2, writers  # The two runs' chiefs, nobody else.
  # Both workers evaluated their shards in step: the metrics are one process's.
  for split, key in (("validation", "val"), ("test", "test")):
    single = _evaluate(params.model_dir, split)
    assert abs(single["loss"] - summary[f"{key}_loss"]) < 1e-5
    assert single["accuracy"] == summary[f"{key}_accuracy"]


MIRRORED = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
    import audioclf
    from audioclf import Params, compat
    from audioclf.data import manifest as manifest_lib
    from audioclf.model import model_dir as model_dir_lib
    from audioclf.data import pipeline
    from audioclf.engines import keras_engine
    params = Params.from_json(sys.argv[1])
    metrics = audioclf.train(params)
    # The same model evaluated by one device and by three: the same numbers.
    model, params, _ = model_dir_lib.load_model(params.model_dir, params)
    manifest = manifest_lib.load(params)
    single = model.evaluate(pipeline.input_fn(params, "eval", manifest=manifest),
                            return_dict=True, verbose=0)
    strategy = keras_engine.make_strategy(params, None)
    with strategy.scope():
      spread, _, _ = model_dir_lib.load_model(params.model_dir, params)
    evaluation = keras_engine._evaluation(strategy, params, manifest)
    compat.fit_under(spread, strategy, pipeline.element_spec(params, "eval", 3))
    with strategy.scope():
      spread = spread.evaluate(evaluation["x"], steps=evaluation["steps"], return_dict=True,
                               verbose=0)
    print(json.dumps({"metrics": metrics, "replicas": strategy.num_replicas_in_sync,
                      "single": single, "spread": spread}))
""")


def test_mirrored_replicas_on_cpus_read_their_batches_where_they_are():
  """No multi-device iterator to feed CPUs: its pipelines autotune (batches.AUTOTUNE)."""
  options = keras_engine._input_options(tf.distribute.MirroredStrategy(["/cpu:0"]))
  assert options.experimental_fetch_to_device is False
  assert options.experimental_replication_mode == tf.distribute.InputReplicationMode.PER_REPLICA


@pytest.mark.slow
def test_mirrored_on_three_logical_cpus(trained, tmp_path):
  one_device, reference = trained("keras")
  params = one_device.replace(strategy="mirrored", batch_size=6,
                              model_dir=str(tmp_path / "model"))
  path = str(tmp_path / "params.json")
  with open(path, "w") as f:
    f.write(params.to_json())
  run = warm.run([sys.executable, "-c", MIRRORED, path], capture_output=True, text=True,
                 timeout=420)
  assert run.returncode == 0, run.stderr[-3000:]
  result = json.loads(run.stdout.strip().splitlines()[-1])
  assert result["replicas"] == 3
  assert result["metrics"]["steps"] == params.train_steps
  # Within noise of the one-device run (batch 8 there, 6 here).
  assert result["metrics"]["val_accuracy"] > 0.9 and reference["val_accuracy"] > 0.9
  assert abs(result["spread"]["loss"] - result["single"]["loss"]) < 1e-5
  assert result["spread"]["accuracy"] == result["single"]["accuracy"]

