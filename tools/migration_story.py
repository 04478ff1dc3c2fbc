"""Prints tools/demo.sh's migration story side by side, from the JSON lines its runs left.

  python tools/migration_story.py runs/demo

Reads, in that folder: legacy-estimator.json (the Estimator's run on the legacy
stack), migrate.json (`python -m audioclf migrate --report` of it),
migrated-evaluate.json (the migrated model evaluated on the current stack
before any more training), current-migrated.json (its training continued with
Keras 3) and current-keras.json (Keras 3 from scratch). Test accuracy comes
from each model's evaluation on the test split; the report's rows compare the
legacy and the migrated model's predictions on the same test clips.
"""

from __future__ import annotations

import json
import os
import sys

COLUMNS = (("legacy-estimator", "Estimator (legacy)"), ("migrated", "migrated (Keras 3)"),
           ("continued", "continued (Keras 3)"), ("scratch", "from scratch (Keras 3)"))


def _load(folder: str, name: str) -> dict:
  path = os.path.join(folder, f"{name}.json")
  if not os.path.isfile(path):
    return {}
  with open(path) as f:
    return json.load(f)


def story(folder: str) -> dict:
  """The story's figures: per column (steps, test accuracy, report accuracy), and the report."""
  migrate = _load(folder, "migrate")
  report = migrate.get("report", {})
  evaluated = _load(folder, "migrated-evaluate")
  runs = {"legacy-estimator": _load(folder, "legacy-estimator"),
          "continued": _load(folder, "current-migrated"), "scratch": _load(folder, "current-keras")}
  columns = {name: {"steps": run.get("steps"), "test_accuracy": run.get("test_accuracy")}
             for name, run in runs.items()}
  columns["migrated"] = {"steps": evaluated.get("steps"),
                         "test_accuracy": evaluated.get("accuracy")}
  columns["legacy-estimator"]["report_accuracy"] = report.get("legacy_accuracy")
  columns["migrated"]["report_accuracy"] = report.get("migrated_accuracy")
  return {"columns": columns, "max_abs_difference": report.get("max_abs_difference"),
          "clips": report.get("clips"), "optimizer_state": migrate.get("optimizer_state"),
          "not_carried": migrate.get("not_carried")}


def main(argv):
  if len(argv) != 2:
    sys.exit(__doc__)
  result = story(argv[1])
  width = 24

  def row(title, key):
    cells = [result["columns"].get(name, {}).get(key) for name, _ in COLUMNS]
    print(f"{title:28s}" + "".join(f"{c:>{width}.4g}" if isinstance(c, (int, float))
                                   else f"{'-':>{width}s}" for c in cells))

  print(f"{'migration story':28s}" + "".join(f"{title:>{width}s}" for _, title in COLUMNS))
  row("steps", "steps")
  row("test accuracy", "test_accuracy")
  row(f"same {result['clips'] or 0} clips, predicted", "report_accuracy")
  difference = result["max_abs_difference"]
  print(f"{'max |p_legacy - p_migrated|':28s}"
        + (f"{difference:>{2 * width}.3g}" if difference is not None else f"{'-':>{2 * width}s}"))
  print(f"{'optimizer state':28s}{str(result['optimizer_state']):>{2 * width}s}")
  print(json.dumps({"migration_story": result}))


if __name__ == "__main__":
  main(sys.argv)
