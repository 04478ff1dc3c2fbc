"""The evaluation report: metrics against scikit-learn's, every file written, and evaluate's report on real runs."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from audioclf.deploy.evaluate import evaluate
from audioclf.deploy.export import export
from audioclf.deploy import report
from audioclf.deploy.evaluate import load_saved_model
from conftest import ENGINES
import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The 35 words of Speech Commands v2: the largest vocabulary the figure must stay legible at.
WORDS_35 = ("backward bed bird cat dog down eight five follow forward four go happy house learn "
            "left marvin nine no off on one right seven sheila six stop three tree two up visual "
            "wow yes zero").split()


def _predictions(n_classes, per_class, seed=0, margin=4.0):
  rng = np.random.default_rng(seed)
  y = np.repeat(np.arange(n_classes), per_class).astype(np.int32)
  logits = rng.normal(size=(len(y), n_classes))
  logits[np.arange(len(y)), y] += margin
  p = np.exp(logits)
  return y, (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


def _events(report_dir):
  tags = {}
  for name in os.listdir(report_dir):
    if name.startswith("events.out.tfevents"):
      for event in tf.compat.v1.train.summary_iterator(os.path.join(report_dir, name)):
        for value in event.summary.value:
          tags[value.tag] = value
  return tags


def test_report_at_35_classes(tmp_path):
  y, p = _predictions(len(WORDS_35), 20)
  files = [f"clips/{WORDS_35[label]}/{i}.wav" for i, label in enumerate(y)]
  out = report.write(str(tmp_path), WORDS_35, y, p, files, title="35 words", step=7)
  pred = p.argmax(axis=1)

  assert 0.5 < out["accuracy"] < 1.0  # Some errors, so every part has content.
  saved = json.loads((tmp_path / report.REPORT_FILE).read_text())
  assert saved["labels"] == WORDS_35 and saved["examples"] == len(y)
  precision, recall, f1, support = report.sk_metrics.precision_recall_fscore_support(
      y, pred, labels=np.arange(35), zero_division=0)
  for i, word in enumerate(WORDS_35):
    row = saved["classes"][word]
    assert row["precision"] == pytest.approx(precision[i])
    assert row["recall"] == pytest.approx(recall[i])
    assert row["f1"] == pytest.approx(f1[i])
    assert row["support"] == support[i] == 20
  assert saved["macro avg"]["f1"] == pytest.approx(f1.mean())
  assert "macro avg" in out["text"] and "weighted avg" in out["text"]

  with open(tmp_path / report.CONFUSION_CSV) as f:
    rows = list(csv.reader(f))
  assert rows[0][1:] == WORDS_35 and [r[0] for r in rows[1:]] == WORDS_35
  matrix = np.array([[int(c) for c in r[1:]] for r in rows[1:]])
  assert matrix.sum() == len(y) and np.trace(matrix) == int((pred == y).sum())
  assert matrix[3, 5] == int(((y == 3) & (pred == 5)).sum())

  with open(tmp_path / report.ERRORS_FILE) as f:
    errors = list(csv.DictReader(f))
  assert len(errors) == int((pred != y).sum())
  confidences = [float(e["probability"]) for e in errors]
  assert confidences == sorted(confidences, reverse=True)
  first = files.index(errors[0]["file"])
  assert errors[0]["true_label"] == WORDS_35[y[first]] != errors[0]["predicted_label"]
  assert errors[0]["predicted_label"] == WORDS_35[pred[first]]
  assert float(errors[0]["probability"]) == pytest.approx(p[first].max(), abs=1e-4)

  # Large enough for 35 labels a side: a cell per label of at least ~30 pixels.
  image = tf.io.decode_png((tmp_path / report.CONFUSION_PNG).read_bytes())
  assert image.shape[0] >= 35 * 30 and image.shape[1] >= 35 * 30
  small = report.confusion_png(np.eye(3, dtype=int), ["a", "b", "c"])
  assert tf.io.decode_png(small).shape[0] < image.shape[0]

  tags = _events(str(tmp_path))
  assert "confusion_matrix" in tags
  assert {f"recall/{w}" for w in WORDS_35} <= set(tags)
  assert "macro_avg/f1" in tags and "accuracy" in tags


def test_report_keeps_classes_the_split_lacks(tmp_path):
  y = np.array([0, 0, 1, 1], np.int32)
  p = np.array([[.9, .1, 0], [.2, .8, 0], [.1, .9, 0], [.3, .7, 0]], np.float32)
  out = report.write(str(tmp_path), ["a", "b", "c"], y, p, ["1", "2", "3", "4"])
  assert out["classes"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
  assert out["classes"]["b"]["precision"] == pytest.approx(2 / 3)
  # Averaged over the labels the data has (a and b), not c's empty row: in the JSON and the table.
  a_f1, b_f1 = 2 * 1 * .5 / 1.5, 2 * (2 / 3) * 1 / (5 / 3)
  assert out["macro avg"]["f1"] == pytest.approx((a_f1 + b_f1) / 2)
  assert out["macro avg"]["recall"] == pytest.approx(.75) and out["macro avg"]["support"] == 4
  macro = next(line for line in out["text"].splitlines() if "macro avg" in line).split()
  assert macro == ["macro", "avg", "0.833", "0.750", f"{(a_f1 + b_f1) / 2:.3f}", "4"]


def test_files_of_matches_skipped_files():
  class E:
    def __init__(self, path):
      self.path = path
  examples = [E("a"), E("b"), E("c")]
  assert report.files_of(examples, 3) == ["a", "b", "c"]
  assert report.files_of(examples, 2, np.array([True, False, True])) == ["a", "c"]
  with pytest.raises(ValueError, match="2 examples for 3 files"):
    report.files_of(examples, 2)
  from audioclf.data.manifest import Example
  silence = Example("", "_silence_", "test", 0, 0)  # Virtual: no file.
  assert report.files_of([Example("/d/a.wav", "a", "test", 1, 1), silence], 2) == [
      "/d/a.wav", "<_silence_ 1>"]


@pytest.mark.parametrize("engine", ENGINES)
def test_evaluate_writes_the_report(trained, engine):
  params, metrics = trained(engine)
  results = evaluate(params.model_dir, "test")
  report_dir = os.path.join(params.model_dir, "eval_test")
  assert results["report_dir"] == report_dir
  saved = json.loads(open(os.path.join(report_dir, report.REPORT_FILE)).read())
  assert saved["accuracy"] == pytest.approx(results["accuracy"])
  assert saved["accuracy"] == pytest.approx(metrics["test_accuracy"])
  assert saved["examples"] == results["files"]
  assert sum(row["support"] for row in saved["classes"].values()) == results["files"]
  with open(os.path.join(report_dir, report.ERRORS_FILE)) as f:
    for error in csv.DictReader(f):  # Each error names its file, in the folder of its label.
      assert os.path.basename(os.path.dirname(error["file"])) == error["true_label"]
  assert "confusion_matrix" in _events(report_dir)


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
  """The trained Keras model_dir's SavedModel, exported once for the tests that read it."""
  params, _ = trained("keras")
  return export(params.model_dir, str(tmp_path_factory.mktemp("export") / "export"))


@pytest.mark.slow
def test_evaluate_a_saved_model_as_its_model_dir(trained, exported, tmp_path):
  params, _ = trained("keras")
  path = exported
  predict, saved_params, labels = load_saved_model(path)
  assert saved_params == params and labels == ["high", "low", "mid"]
  from_dir = evaluate(params.model_dir, "test", report_dir=str(tmp_path / "a"))
  from_saved = evaluate(None, "test", saved_model=path)
  assert from_saved["report_dir"] == os.path.join(path, "eval_test")
  assert from_saved["accuracy"] == from_dir["accuracy"]
  assert from_saved["loss"] == pytest.approx(from_dir["loss"], rel=1e-5)
  assert from_saved["report"]["classes"] == from_dir["report"]["classes"]


@pytest.mark.slow
def test_evaluate_command_line_prints_the_table_then_json(trained, exported, tmp_path):
  params, metrics = trained("keras")
  path = exported
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  for source in (f"--model_dir={params.model_dir}", f"--saved_model={path}"):
    proc = warm.run([sys.executable, "-m", "audioclf", "evaluate", source, "--split=test",
                     f"--report_dir={tmp_path / 'report'}"],
                    cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert any(line.split()[:1] == ["weighted"] for line in lines)
    last = json.loads(lines[-1])
    assert last["accuracy"] == pytest.approx(metrics["test_accuracy"])
    assert os.path.isfile(tmp_path / "report" / report.CONFUSION_PNG)


def test_evaluate_names_the_files_around_skipped_ones(trained, tmp_path):
  params, _ = trained("keras")
  from conftest import write_tone_dataset
  data = write_tone_dataset(tmp_path / "data", per_label=12, seconds=0.5)
  for i in range(8):  # Some land in the test split, whichever way the speakers hash.
    (tmp_path / "data" / "mid" / f"bad{i}_nohash_0.wav").write_bytes(b"RIFF not really")
  other = params.replace(data_dir=data, cache_dir=str(tmp_path / "cache"), on_bad_file="skip")
  for _ in range(2):  # A cold pass, then a warm one from the cache.
    results = evaluate(params.model_dir, "test", other, report_dir=str(tmp_path / "report"))
    saved = json.loads((tmp_path / "report" / report.REPORT_FILE).read_text())
    assert saved["examples"] < results["files"]  # Bad ones were skipped...
    with open(tmp_path / "report" / report.ERRORS_FILE) as f:
      for error in csv.DictReader(f):  # ...and each error still names its own file.
        assert "bad" not in error["file"]
        assert os.path.basename(os.path.dirname(error["file"])) == error["true_label"]


def test_group_accuracy_puts_the_weakest_group_first(tmp_path):
  groups = ["a", "a", "b", "b", "b", "c", "d", "d"]
  y_true = np.array([0, 1, 0, 1, 1, 0, 0, 0])
  y_pred = np.array([0, 1, 0, 0, 0, 1, 0, 1])
  rows = report.group_accuracy(groups, y_true, y_pred)
  # b 1/3, then c and d... c 0/1 is weaker than d 1/2; a, all right, last.
  assert [(r["group"], r["examples"], round(r["accuracy"], 3)) for r in rows] == [
      ("c", 1, 0.0), ("b", 3, 0.333), ("d", 2, 0.5), ("a", 2, 1.0)]
  table = report.group_table("speaker", rows, shown=2)
  assert table.splitlines()[0] == "accuracy by speaker, weakest first (4 groups)"
  assert table.splitlines()[2].split() == ["c", "1", "0.000"]
  assert table.splitlines()[-1] == f"... 2 more in {report.GROUPS_FILE}"
  # Equal accuracies: the larger group first, its weakness the surer one.
  assert [r["group"] for r in report.group_accuracy(["x", "y", "y"], [0, 0, 0], [1, 1, 1])] == [
      "y", "x"]


def test_evaluate_reports_accuracy_per_speaker_and_per_csv_column(trained, tmp_path):
  from audioclf.data import manifest as manifest_lib
  params, _ = trained("keras")
  examples = manifest_lib.load(params).examples
  csv_path = tmp_path / "m.csv"
  with open(csv_path, "w") as f:  # The same files and splits, with a speaker and a mic each.
    f.write("path,label,split,speaker,mic\n")
    for i, e in enumerate(examples):
      f.write(f"{e.path},{e.label},{e.split},{os.path.basename(e.path)[:6]},m{i % 2}\n")
  by_csv = params.replace(data_dir=None, manifest=str(csv_path))
  test = [e for e in examples if e.split == "test"]
  for source, by, names in (
      (params, "speaker", {manifest_lib.speaker_of(e.path) for e in test}),
      (by_csv, "speaker", {os.path.basename(e.path)[:6] for e in test}),  # The column's.
      (by_csv, "mic", {f"m{examples.index(e) % 2}" for e in test})):
    report_dir = tmp_path / f"report_{by}_{source.manifest is None}"
    results = evaluate(params.model_dir, "test", source, report_dir=str(report_dir), group_by=by)
    rows = results["report"]["groups"]["rows"]
    assert results["report"]["groups"]["by"] == by
    assert sum(r["examples"] for r in rows) == results["files"]
    assert sum(r["accuracy"] * r["examples"] for r in rows) == pytest.approx(
        results["accuracy"] * results["files"])
    assert [r["accuracy"] for r in rows] == sorted(r["accuracy"] for r in rows)
    assert {r["group"] for r in rows} == names
    with open(report_dir / report.GROUPS_FILE) as f:
      assert [row["speaker" if by == "speaker" else by] for row in csv.DictReader(f)] == [
          r["group"] for r in rows]
    assert f"accuracy by {by}, weakest first" in results["report"]["text"]
  from audioclf.data.manifest import DataError
  with pytest.raises(DataError, match="--group_by=room: no such column .* group by speaker, mic"):
    evaluate(params.model_dir, "test", by_csv, group_by="room")
