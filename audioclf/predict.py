"""python -m audioclf.predict --model_dir=runs/demo/keras clip.wav more_clips/ ... [--output=out.csv]

Classifies audio files, or every audio file under a folder, with a model_dir
from either engine; prints `path<TAB>label<TAB>probability` per file of at
most one clip. A longer file is classified in sliding windows (--hop_seconds)
streamed from disk, and each segment where a label is heard (audioclf.segments)
prints as `path<TAB>start<TAB>end<TAB>label<TAB>peak probability`, in seconds.
--output also writes every result as CSV (file,start,end,label,probability;
no start or end for a short file) or JSON. --save_probabilities=probs.npz
writes every class's probability for each file of at most one clip (what
`python -m audioclf.migrate --report` compares across stacks).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from typing import Optional, Sequence

import numpy as np
from absl import app
from absl import flags
from absl import logging

from audioclf import cli
from audioclf import decode
from audioclf import model_dir as model_dir_lib
from audioclf import models
from audioclf.manifest import AUDIO_EXTENSIONS
from audioclf.params import Params

FLAGS = flags.FLAGS


def audio_files(paths: Sequence[str]) -> list[str]:
  """`paths` with each folder replaced by the audio files under it, sorted.

  Raises:
    FileNotFoundError: a path that does not exist.
  """
  files = []
  for path in paths:
    if os.path.isdir(path):
      for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files.extend(os.path.join(dirpath, name) for name in sorted(filenames)
                     if os.path.splitext(name)[1].lower() in AUDIO_EXTENSIONS)
    elif os.path.exists(path):
      files.append(path)
    else:
      raise FileNotFoundError(f"no such file or folder: {path!r}")
  return files


def center_clip(samples: np.ndarray, clip_samples: int) -> np.ndarray:
  """The middle clip_samples of `samples`, zero-padded at the end if shorter.

  input_fn's evaluation window, cut by the same functions (audioclf.data.
  sampler), so a file scores here as it scored there.
  """
  from audioclf.data import sampler  # pylint: disable=g-import-not-at-top
  length = len(samples)
  window = sampler.window(np.asarray(samples, np.float32), 0, length,
                          sampler.center_start(length, clip_samples), clip_samples)
  return window.numpy()


def probabilities(model_dir: str, paths: Sequence[str], params: Optional[Params] = None
                  ) -> tuple[list[str], np.ndarray, list[str]]:
  """Every class's probability for each audio file's middle clip, from the latest checkpoint.

  Args:
    model_dir: a folder either engine trained.
    paths: audio files and folders (searched recursively for audio files).
    params: parameters to use instead of model_dir's params.json.

  Returns:
    (files, probabilities float32 [files, classes], the model's labels), in
    the order of `paths`. Files that cannot be decoded are left out when
    params.on_bad_file is "skip".

  Raises:
    FileNotFoundError: a path that does not exist.
    decode.BadAudioError: an undecodable file, unless on_bad_file is "skip".
  """
  model, params, labels = model_dir_lib.load_model(model_dir, params)
  files = audio_files(paths)
  predict_batch = models.predict_fn(model)
  kept, batches = [], []
  for start in range(0, len(files), params.batch_size):
    waveforms = []
    for path in files[start:start + params.batch_size]:
      try:
        samples = decode.decode_file(path, params.sample_rate, params.resample_quality)
      except decode.BadAudioError as e:
        if params.on_bad_file != "skip":
          raise
        logging.warning("audioclf: skipping %s", e)
        continue
      kept.append(path)
      waveforms.append(center_clip(samples, params.clip_samples))
    if waveforms:
      batches.append(np.asarray(predict_batch(np.stack(waveforms)), np.float32))
  empty = np.zeros((0, len(labels)), np.float32)
  return kept, np.concatenate(batches) if batches else empty, labels


def predict(model_dir: str, paths: Sequence[str],
            params: Optional[Params] = None) -> list[tuple[str, str, float]]:
  """The most probable label of each audio file.

  Args:
    model_dir: a folder either engine trained.
    paths: audio files and folders (searched recursively for audio files).
    params: parameters to use instead of model_dir's params.json.

  Returns:
    (path, label, probability) per file, in the order of `paths`. Files that
    cannot be decoded are left out when params.on_bad_file is "skip".

  Raises:
    FileNotFoundError: a path that does not exist.
    decode.BadAudioError: an undecodable file, unless on_bad_file is "skip".
  """
  return _best(*probabilities(model_dir, paths, params))


def _best(files, probs, labels) -> list[tuple[str, str, float]]:
  best = np.argmax(probs, axis=1)
  return [(path, labels[i], float(p[i])) for path, i, p in zip(files, best, probs)]


def save_probabilities(path: str, files: Sequence[str], probs: np.ndarray,
                       labels: Sequence[str]) -> None:
  """Writes what `probabilities` returned to an .npz that `load_probabilities` reads, on any stack.

  Plain arrays only (no pickled objects), so numpy 1 and numpy 2 read each
  other's files: how `python -m audioclf.migrate --report` compares a legacy
  model's outputs, computed on the legacy stack, with the migrated model's.
  """
  np.savez(path, paths=np.asarray(list(files), dtype=str), probabilities=probs,
           labels=np.asarray(list(labels), dtype=str))


def load_probabilities(path: str) -> tuple[list[str], np.ndarray, list[str]]:
  """(files, probabilities, labels) from a `save_probabilities` file.

  Relative file paths are taken relative to the .npz's folder, so a file and
  its clips can move together.
  """
  with np.load(path) as saved:
    folder = os.path.dirname(os.path.abspath(path))
    files = [os.path.join(folder, str(p)) for p in saved["paths"]]
    return files, saved["probabilities"], [str(label) for label in saved["labels"]]


def main(argv):
  if len(argv) < 2:
    raise app.UsageError("give audio files or folders to classify")
  from audioclf import segments  # pylint: disable=g-import-not-at-top

  params = cli.params_for_model_dir()
  files = audio_files(argv[1:])
  long_files = [f for f in files if _is_long(f, params)]
  short = [f for f in files if f not in set(long_files)]
  results = []
  if short:
    short, probs, labels = probabilities(FLAGS.model_dir, short, params)
    for path, label, probability in _best(short, probs, labels):
      print(f"{path}\t{label}\t{probability:.4f}", flush=True)
      results.append({"file": path, "label": label, "probability": probability})
    if FLAGS.save_probabilities:
      save_probabilities(FLAGS.save_probabilities, short, probs, labels)
  if long_files:
    for result in segments.detect(FLAGS.model_dir, long_files, params, FLAGS.hop_seconds,
                                  FLAGS.threshold, FLAGS.background_labels):
      for s in result["segments"]:
        print(f"{result['file']}\t{s.start:.2f}\t{s.end:.2f}\t{s.label}\t{s.peak:.4f}",
              flush=True)
      results.append(dict(result, segments=[dataclasses.asdict(s) for s in result["segments"]]))
  if FLAGS.output:
    _write_output(FLAGS.output, results)


def _is_long(path: str, params: Params) -> bool:
  """Longer than one clip (by its header); an unreadable file is left to predict's handling."""
  from audioclf import segments  # pylint: disable=g-import-not-at-top
  try:
    return segments.duration(path) > params.clip_seconds + 1.0 / params.sample_rate
  except decode.BadAudioError:
    return False


def _write_output(path: str, results: list[dict]) -> None:
  """Every file's label or segments, as CSV or JSON by the file's extension."""
  if path.endswith(".json"):
    with open(path, "w") as f:
      json.dump({"files": results}, f, indent=2)
      f.write("\n")
    return
  if not path.endswith(".csv"):
    raise ValueError(f"the output must be a .csv or .json file, got {path!r}")
  with open(path, "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["file", "start", "end", "label", "probability"])
    for result in results:
      if "segments" not in result:
        out.writerow([result["file"], "", "", result["label"], f"{result['probability']:.4f}"])
      for s in result.get("segments", ()):
        out.writerow([result["file"], f"{s['start']:.3f}", f"{s['end']:.3f}", s["label"],
                      f"{s['peak']:.4f}"])


def run():
  cli.define_model_dir_flags()
  flags.mark_flag_as_required("model_dir")
  cli.run(main)


if __name__ == "__main__":
  run()
