"""The evaluation report: per-class metrics, the confusion matrix (CSV, PNG, TensorBoard) and the errors.

  <report_dir>/                 (evaluate writes <model_dir>/eval_<split>/)
    report.json                 per-class precision, recall, F1, support; macro and weighted averages
    confusion_matrix.csv        counts, rows = true label, columns = predicted label
    confusion_matrix.png        the same, labels on both axes, counts in the non-zero cells
    errors.csv                  file, true label, predicted label, probability; most confident first
    groups.csv                  with --group_by: accuracy and examples per group (a speaker, a
                                CSV column's value), the weakest first; also in report.json
    events.out.tfevents.*       the image and per-class scalars, for TensorBoard

scikit-learn computes the metrics and draws the matrix; this module only lays
them out.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import tensorflow as tf
from sklearn import metrics as sk_metrics

REPORT_FILE = "report.json"
CONFUSION_CSV = "confusion_matrix.csv"
CONFUSION_PNG = "confusion_matrix.png"
ERRORS_FILE = "errors.csv"
GROUPS_FILE = "groups.csv"
GROUPS_SHOWN = 10  # Rows of the printed per-group table; groups.csv holds them all.


def classify(predict: Callable[[np.ndarray], np.ndarray],
             dataset: Iterable) -> tuple[np.ndarray, np.ndarray]:
  """Runs `predict` over every batch of an input_fn evaluation dataset.

  Args:
    predict: float32 waveforms [batch, samples] -> probabilities [batch, classes].
    dataset: ({"waveform": ...}, label ids) batches, read once to the end.

  Returns:
    (probabilities float32 [examples, classes], label ids int32 [examples]).
  """
  probabilities, labels = [], []
  for features, y in dataset:
    probabilities.append(np.asarray(predict(features["waveform"].numpy()), np.float32))
    labels.append(y.numpy())
  if not labels:
    raise ValueError("the evaluation dataset delivered no examples")
  return np.concatenate(probabilities), np.concatenate(labels).astype(np.int32)


def write(report_dir: str, labels: Sequence[str], y_true: np.ndarray, probabilities: np.ndarray,
          files: Sequence[str], title: str = "", step: int = 0, group_by: Optional[str] = None,
          groups: Optional[Sequence[str]] = None) -> dict[str, Any]:
  """Writes the report of one evaluation into report_dir and returns report.json's content.

  Args:
    report_dir: the folder to write (created).
    labels: the label vocabulary, in id order.
    y_true: int [examples], the true label ids.
    probabilities: float [examples, classes], the model's outputs.
    files: the audio file of each example.
    title: a heading for the figure (e.g. "test split, step 600").
    step: the TensorBoard step of the summaries (the checkpoint's).
    group_by: what `groups` are (e.g. "speaker"), for the headings.
    groups: the group of each example, for accuracy per group.

  Returns:
    {"labels", "accuracy", "classes": {label: {precision, recall, f1, support}},
     "macro avg": {...}, "weighted avg": {...}, "text": the printable table},
    and with groups "groups": {"by": group_by, "rows": group_accuracy's rows}.
  """
  os.makedirs(report_dir, exist_ok=True)
  y_pred = probabilities.argmax(axis=1)
  table, text = _class_table(labels, y_true, y_pred)
  accuracy = float(np.mean(y_pred == y_true))
  classes = {name: _row(table[name]) for name in labels}
  report = {"labels": list(labels), "examples": int(len(y_true)), "accuracy": accuracy,
            "classes": classes, "macro avg": _row(table["macro avg"]),
            "weighted avg": _row(table["weighted avg"])}
  if groups is not None:
    rows = group_accuracy(groups, y_true, y_pred)
    report["groups"] = {"by": group_by, "rows": rows}
    write_groups(os.path.join(report_dir, GROUPS_FILE), group_by, rows)
    text += "\n" + group_table(group_by, rows)
  with open(os.path.join(report_dir, REPORT_FILE), "w") as f:
    json.dump(report, f, indent=2)
    f.write("\n")
  png = _write_confusion(report_dir, labels, y_true, y_pred, title or f"accuracy {accuracy:.3f}")
  write_errors(os.path.join(report_dir, ERRORS_FILE), labels, y_true, probabilities, files)
  _summaries(report_dir, report, png, step)
  return dict(report, text=text)


def _class_table(labels: Sequence[str], y_true: np.ndarray,
                 y_pred: np.ndarray) -> tuple[dict, str]:
  """sklearn's classification report of the model's every label, as a dict and as text."""
  ids = np.arange(len(labels))
  # labels= keeps a class the split lacks in the table (support 0), so rows
  # and matrix always line up with the model's vocabulary.
  table = sk_metrics.classification_report(y_true, y_pred, labels=ids, target_names=list(labels),
                                           digits=3, zero_division=0, output_dict=True)
  text = sk_metrics.classification_report(y_true, y_pred, labels=ids, target_names=list(labels),
                                          digits=3, zero_division=0)
  present = np.unique(y_true)
  if len(present) < len(ids):
    # A label no example has has no recall: the macro average is over the data's labels only.
    table["macro avg"] = dict(zip(("precision", "recall", "f1-score"), sk_metrics.
                                  precision_recall_fscore_support(y_true, y_pred, labels=present,
                                                                  average="macro",
                                                                  zero_division=0)[:3]),
                              support=len(y_true))
    text = _with_row(text, "macro avg", table["macro avg"])
  return table, text


def _write_confusion(report_dir: str, labels: Sequence[str], y_true: np.ndarray,
                     y_pred: np.ndarray, title: str) -> bytes:
  """Writes the confusion matrix as CSV and PNG; returns the PNG."""
  confusion = sk_metrics.confusion_matrix(y_true, y_pred, labels=np.arange(len(labels)))
  with open(os.path.join(report_dir, CONFUSION_CSV), "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["true \\ predicted", *labels])
    for name, row in zip(labels, confusion):
      out.writerow([name, *row.tolist()])
  png = confusion_png(confusion, labels, title)
  with open(os.path.join(report_dir, CONFUSION_PNG), "wb") as f:
    f.write(png)
  return png


def group_accuracy(groups: Sequence[str], y_true: np.ndarray,
                   y_pred: np.ndarray) -> list[dict[str, Any]]:
  """Accuracy per group, the weakest first: [{"group", "examples", "accuracy"}, ...].

  Among equal accuracies the larger group comes first: its weakness is the
  surer one.
  """
  groups = np.asarray(list(groups), dtype=str)
  correct = np.asarray(y_pred) == np.asarray(y_true)
  rows = [{"group": str(g), "examples": int(np.sum(groups == g)),
           "accuracy": float(np.mean(correct[groups == g]))} for g in np.unique(groups)]
  return sorted(rows, key=lambda r: (r["accuracy"], -r["examples"], r["group"]))


def write_groups(path: str, group_by: Optional[str], rows: Sequence[dict[str, Any]]) -> None:
  """groups.csv: group_accuracy's rows, as they are ordered."""
  with open(path, "w", newline="") as f:
    out = csv.writer(f)
    out.writerow([group_by or "group", "examples", "accuracy"])
    for row in rows:
      out.writerow([row["group"], row["examples"], f"{row['accuracy']:.4f}"])


def group_table(group_by: Optional[str], rows: Sequence[dict[str, Any]],
                shown: int = GROUPS_SHOWN) -> str:
  """The weakest `shown` groups as a printable table, with how many more groups.csv holds."""
  name = group_by or "group"
  width = max(len(name), *(len(r["group"]) for r in rows[:shown]))
  lines = [f"accuracy by {name}, weakest first ({len(rows)} groups)",
           f"{name:<{width}s} {'examples':>9s} {'accuracy':>9s}"]
  lines += [f"{r['group']:<{width}s} {r['examples']:9d} {r['accuracy']:9.3f}" for r in rows[:shown]]
  if len(rows) > shown:
    lines.append(f"... {len(rows) - shown} more in {GROUPS_FILE}")
  return "\n".join(lines) + "\n"


def write_errors(path: str, labels: Sequence[str], y_true: np.ndarray, probabilities: np.ndarray,
                 files: Sequence[str]) -> int:
  """errors.csv: each misclassified file, the most confident mistakes first.

  Returns:
    The number of errors written.
  """
  y_pred = probabilities.argmax(axis=1)
  wrong = np.flatnonzero(y_pred != y_true)
  confidence = probabilities[wrong, y_pred[wrong]]
  # A stable sort keeps the split's order among equal confidences.
  wrong = wrong[np.argsort(-confidence, kind="stable")]
  with open(path, "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["file", "true_label", "predicted_label", "probability"])
    for i in wrong:
      out.writerow([files[i], labels[y_true[i]], labels[y_pred[i]],
                    f"{probabilities[i, y_pred[i]]:.4f}"])
  return len(wrong)


def confusion_png(confusion: np.ndarray, labels: Sequence[str], title: str = "") -> bytes:
  """The confusion matrix as a PNG: true labels down, predicted across, counts in the cells.

  Sized per class, so 35 labels stay legible; zero cells are left blank, which
  makes the few confusions stand out from the diagonal.
  """
  # The object API with an Agg canvas: no pyplot state, no display needed.
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  n = len(labels)
  side = max(4.5, 0.36 * n + 2.5)
  fig = Figure(figsize=(side + 1.0, side), dpi=110, layout="constrained")
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  font = 10 if n <= 12 else 8 if n <= 24 else 7
  display = sk_metrics.ConfusionMatrixDisplay(confusion, display_labels=list(labels))
  display.plot(ax=ax, cmap="Blues", values_format="d", xticks_rotation="vertical",
               colorbar=False, text_kw={"fontsize": font})
  fig.colorbar(display.im_, ax=ax, shrink=0.5, label="clips")
  for cell, count in zip(display.text_.ravel(), confusion.ravel()):
    if count == 0:
      cell.set_text("")
  ax.tick_params(labelsize=font + 1)
  ax.set_xlabel("predicted label")
  ax.set_ylabel("true label")
  if title:
    ax.set_title(title)
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png")
  return buffer.getvalue()


def _with_row(text: str, name: str, values: dict) -> str:
  """classification_report's text with the figures of its row `name` replaced by `values`'."""
  figures = " ".join(f"{values[k]:9.3f}" for k in ("precision", "recall", "f1-score"))
  return re.sub(rf"^(\s*{name}) +[\d.]+ +[\d.]+ +[\d.]+", lambda m: f"{m.group(1)}  {figures}",
                text, flags=re.M)


def _row(values: dict) -> dict[str, float]:
  return {"precision": float(values["precision"]), "recall": float(values["recall"]),
          "f1": float(values["f1-score"]), "support": int(values["support"])}


def _summaries(report_dir: str, report: dict, png: bytes, step: int) -> None:
  """The confusion image and per-class figures, as a TensorBoard run named after report_dir."""
  writer = tf.summary.create_file_writer(report_dir)
  with writer.as_default():
    image = tf.image.decode_png(png, channels=4)[tf.newaxis]
    tf.summary.image("confusion_matrix", image, step=step)
    tf.summary.scalar("accuracy", report["accuracy"], step=step)
    for average in ("macro avg", "weighted avg"):
      for key in ("precision", "recall", "f1"):
        tf.summary.scalar(f"{average.replace(' ', '_')}/{key}", report[average][key], step=step)
    for name, row in report["classes"].items():
      for key in ("precision", "recall", "f1"):
        tf.summary.scalar(f"{key}/{name}", row[key], step=step)
  writer.close()


def files_of(examples: Sequence, delivered: int, kept: Optional[np.ndarray] = None) -> list[str]:
  """The file of each delivered example: the split's files, less those skipped as bad.

  A _silence_ clip (no file) is named "<_silence_ i>", i its place in the split.

  Args:
    examples: the split's manifest examples, in input_fn's order.
    delivered: how many examples the evaluation dataset gave.
    kept: bool [len(examples)], which files decoded (the cache's lengths > 0);
      needed only when some were skipped.

  Raises:
    ValueError: the counts do not add up, so files cannot be matched.
  """
  # A virtual _silence_ clip has no file: it is named by its label and place.
  return of_delivered([e.path or f"<{e.label} {i}>" for i, e in enumerate(examples)], delivered,
                      kept)


def of_delivered(values: Sequence, delivered: int, kept: Optional[np.ndarray] = None) -> list:
  """Per-example `values` of a split, less those of the files skipped as bad (see files_of).

  Raises:
    ValueError: the counts do not add up, so values cannot be matched.
  """
  if delivered == len(values):
    return list(values)
  if kept is not None and int(np.sum(kept)) == delivered:
    return [v for v, k in zip(values, kept) if k]
  raise ValueError(f"the evaluation gave {delivered} examples for {len(values)} files, and "
                   "the cache does not say which were skipped")
