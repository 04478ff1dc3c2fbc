"""audioclf.evaluate and audioclf.predict on model_dirs from either engine, as Python calls and CLIs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from audioclf.data import manifest as manifest_lib
from audioclf.deploy.evaluate import evaluate
from audioclf.model import model_dir as model_dir_lib
from audioclf.deploy import predict as predict_lib
from audioclf.deploy.predict import audio_files, center_clip, predict
from conftest import ENGINES, ESTIMATOR_ELSE_KERAS, tone, write_tone_dataset
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("engine", ENGINES)
def test_evaluate_reproduces_the_runs_test_metrics(trained, engine):
  params, metrics = trained(engine)
  results = evaluate(params.model_dir, "test")
  assert results["engine"] == engine
  assert results["split"] == "test"
  assert results["steps"] == metrics["steps"]
  assert results["accuracy"] == pytest.approx(metrics["test_accuracy"])
  # Keras weighs the smaller last batch by its size; the Estimator averages
  # batch losses, so its loss may differ a little.
  tolerance = 1e-5 if engine == "keras" else 0.5
  assert results["loss"] == pytest.approx(metrics["test_loss"], rel=tolerance, abs=1e-4)


def test_evaluate_refuses_data_with_labels_the_model_does_not_know(trained, tmp_path):
  params, _ = trained("keras")
  other = params.replace(data_dir=write_tone_dataset(tmp_path / "other", labels=("low", "b")))
  with pytest.raises(model_dir_lib.ModelDirError,
                     match=r"does not know the data's labels \['b'\] \(it knows \['high', 'low', "
                           r"'mid'\]\)"):
    evaluate(params.model_dir, "validation", other)


# The tone model's frequencies (conftest.write_tone_dataset's for its three labels).
TONES = {"low": 300.0, "mid": 660.0, "high": 1452.0}


@pytest.mark.parametrize("engine", ENGINES)
def test_evaluate_on_some_of_the_models_labels_maps_them_by_name(trained, engine, tmp_path):
  params, _ = trained(engine)
  # low and mid only: ids 0 and 1 of the data, 1 and 2 of the model (high, low, mid). One mid
  # tone sits in low's folder, so one answer is wrong by the data's own word.
  root = write_tone_dataset(tmp_path / "some", labels=("low", "mid"), per_label=6, freqs=TONES)
  sf.write(os.path.join(root, "low", "spk999mislabeled_nohash_0.wav"),
           tone(TONES["mid"], 0.5, params.sample_rate), params.sample_rate, subtype="PCM_16")
  with open(os.path.join(root, "testing_list.txt"), "w") as f:  # Every file a test clip.
    f.writelines(f"{label}/{name}\n" for label in ("low", "mid")
                 for name in sorted(os.listdir(os.path.join(root, label))))
  some = params.replace(data_dir=root, cache_dir=str(tmp_path / "cache"))
  results = evaluate(params.model_dir, "test", some, report_dir=str(tmp_path / "report"))
  # The same files through predict: the share whose label is their folder's.
  predicted = predict(params.model_dir, [root], some)
  said = [label == os.path.basename(os.path.dirname(path)) for path, label, _ in predicted]
  assert results["files"] == len(predicted) == 13
  assert results["accuracy"] == pytest.approx(np.mean(said))
  assert results["accuracy"] == pytest.approx(12 / 13)  # The tones are easy; the stray is not.
  report = json.loads((tmp_path / "report" / "report.json").read_text())
  assert report["labels"] == ["high", "low", "mid"]  # The model's, high with no support.
  assert {name: row["support"] for name, row in report["classes"].items()} == {
      "high": 0, "low": 7, "mid": 6}
  with open(tmp_path / "report" / "confusion_matrix.csv") as f:
    rows = [line.strip().split(",") for line in f][1:]
  assert rows == [["high", "0", "0", "0"], ["low", "0", "6", "1"], ["mid", "0", "0", "6"]]


def test_evaluate_needs_a_trained_model_dir(tmp_path):
  with pytest.raises(model_dir_lib.ModelDirError, match="no params.json"):
    evaluate(str(tmp_path))


def test_center_clip_crops_the_middle_and_pads_the_end():
  x = np.arange(10, dtype=np.float32)
  np.testing.assert_array_equal(center_clip(x, 4), [3, 4, 5, 6])
  np.testing.assert_array_equal(center_clip(x[:3], 5), [0, 1, 2, 0, 0])


def test_audio_files_expands_folders_and_rejects_missing(tmp_path):
  (tmp_path / "d" / "sub").mkdir(parents=True)
  for name in ("d/b.wav", "d/sub/a.flac", "d/notes.txt", "c.wav"):
    (tmp_path / name).write_bytes(b"")
  files = audio_files([str(tmp_path / "c.wav"), str(tmp_path / "d")])
  assert [os.path.relpath(f, tmp_path) for f in files] == ["c.wav", "d/b.wav", "d/sub/a.flac"]
  with pytest.raises(FileNotFoundError, match="nope"):
    audio_files([str(tmp_path / "nope")])


@pytest.mark.parametrize("engine", ENGINES)
def test_predict_names_the_tone_of_each_file(trained, engine, tmp_path):
  params, _ = trained(engine)
  sr = params.sample_rate
  # A long and a short file, and one at another rate: cropped, padded, resampled.
  sf.write(tmp_path / "low.wav", tone(300.0, 1.3, sr), sr, subtype="PCM_16")
  sf.write(tmp_path / "mid.flac", tone(660.0, 0.45, sr), sr)
  sf.write(tmp_path / "high.wav", tone(1452.0, 0.5, 22050), 22050, subtype="FLOAT")
  results = predict(params.model_dir, [str(tmp_path)])
  assert [os.path.basename(p) for p, _, _ in results] == ["high.wav", "low.wav", "mid.flac"]
  for path, label, probability in results:
    assert label == os.path.splitext(os.path.basename(path))[0]
    assert 1 / 3 < probability <= 1.0


def test_predict_saves_every_probability_for_another_stack(trained, tmp_path):
  params, _ = trained("keras")
  for name, freq in (("low", 300.0), ("high", 1452.0)):
    sf.write(tmp_path / f"{name}.wav", tone(freq, 0.5, params.sample_rate), params.sample_rate)
  files, probs, labels = predict_lib.probabilities(params.model_dir, [str(tmp_path)])
  assert probs.shape == (2, 3) and probs.dtype == np.float32
  np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
  assert [(p, label) for p, label, _ in predict(params.model_dir, files)] == [
      (f, labels[i]) for f, i in zip(files, np.argmax(probs, axis=1))]
  # Paths relative to the file's folder: the file and its clips move together.
  out = tmp_path / "probs.npz"
  predict_lib.save_probabilities(str(out), [os.path.basename(f) for f in files], probs, labels)
  loaded_files, loaded, loaded_labels = predict_lib.load_probabilities(str(out))
  assert loaded_files == files and loaded_labels == labels
  np.testing.assert_array_equal(loaded, probs)


def test_predict_fails_on_bad_audio_unless_told_to_skip(trained, tmp_path):
  params, _ = trained("keras")
  (tmp_path / "broken.wav").write_bytes(b"RIFF not really")
  sf.write(tmp_path / "ok.wav", tone(300.0, 0.5, params.sample_rate), params.sample_rate)
  with pytest.raises(predict_lib.decode.BadAudioError, match="broken.wav"):
    predict(params.model_dir, [str(tmp_path)])
  results = predict(params.model_dir, [str(tmp_path)], params.replace(on_bad_file="skip"))
  assert [os.path.basename(p) for p, _, _ in results] == ["ok.wav"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ESTIMATOR_ELSE_KERAS)
def test_evaluate_and_predict_command_lines(trained, tmp_path, engine):
  params, metrics = trained(engine)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

  def run(*args):
    proc = warm.run([sys.executable, "-m", *args], cwd=ROOT, env=env,
                    capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()

  last = json.loads(run("audioclf", "evaluate", f"--model_dir={params.model_dir}", "--split=test")[-1])
  assert last["accuracy"] == pytest.approx(metrics["test_accuracy"])
  clip = str(tmp_path / "clip.wav")
  sf.write(clip, tone(1452.0, 0.5, params.sample_rate), params.sample_rate)
  lines = run("audioclf", "predict", f"--model_dir={params.model_dir}", clip)
  path, label, probability = lines[-2].split("\t")
  assert json.loads(lines[-1])["clips"] == 1  # Every command ends with its JSON line.
  assert (path, label) == (clip, "high")
  assert 0.0 < float(probability) <= 1.0


def test_evaluate_needs_a_checkpoint(trained, tmp_path):
  params, _ = trained("keras")
  for name in ("params.json", "labels.txt"):
    (tmp_path / name).write_text(open(os.path.join(params.model_dir, name)).read())
  with pytest.raises(model_dir_lib.ModelDirError, match="no checkpoint yet"):
    evaluate(str(tmp_path))


def test_report_rows_match_with_skipped_files_and_silence_clips(tmp_path):
  import audioclf
  from audioclf.deploy import report as report_lib
  from audioclf.deploy.evaluate import _decoded
  data = write_tone_dataset(tmp_path / "data", per_label=8)
  params = audioclf.Params(data_dir=data, cache_dir=str(tmp_path / "cache"), batch_size=4,
                           validation_percent=50, testing_percent=0, on_bad_file="skip",
                           silence_percent=50.0)
  examples = manifest_lib.load(params).split("validation")
  bad = next(e.path for e in examples if e.path)
  open(bad, "wb").write(b"not audio")
  examples = manifest_lib.load(params).split("validation")  # Its new size and mtime.
  delivered = sum(len(y) for _, y in audioclf.input_fn(params, "eval"))
  silence = [e for e in examples if e.virtual]
  assert silence and delivered == len(examples) - 1
  files = report_lib.files_of(examples, delivered, _decoded(params, examples, delivered))
  assert bad not in files and len(files) == delivered
  start = len(examples) - len(silence)
  assert files[-len(silence):] == [f"<_silence_ {i}>" for i in range(start, len(examples))]
