"""Labels for audio files from a model_dir: each file's middle clip, and every class's probability.

`python -m audioclf predict` prints them (audioclf.commands.predict); files
longer than a clip go to audioclf.deploy.segments instead. `save_probabilities`
writes what `python -m audioclf migrate --report` compares across stacks.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
from absl import logging

from audioclf.data import decode, window
from audioclf.data.manifest import AUDIO_EXTENSIONS
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import Params


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
  window), so a file scores here as it scored there.
  """
  length = len(samples)
  return window.cut(np.asarray(samples, np.float32), 0, length,
                    window.center_start(length, clip_samples), clip_samples).numpy()


def probabilities(model_dir: str, paths: Sequence[str], params: Optional[Params] = None,
                  checkpoint: str = "best") -> tuple[list[str], np.ndarray, list[str]]:
  """Every class's probability for each audio file's middle clip.

  Args:
    model_dir: a folder either engine trained.
    paths: audio files and folders (searched recursively for audio files).
    params: parameters to use instead of model_dir's params.json.
    checkpoint: best (the one --keep_best kept, where there is one, else the
      latest), last, or a checkpoint's path (model_dir.choose_checkpoint).

  Returns:
    (files, probabilities float32 [files, classes], the model's labels), in
    the order of `paths`. Files that cannot be decoded are left out when
    params.on_bad_file is "skip".

  Raises:
    FileNotFoundError: a path that does not exist.
    decode.BadAudioError: an undecodable file, unless on_bad_file is "skip".
  """
  model, params, labels = model_dir_lib.load_model(model_dir, params, checkpoint)
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


def predict(model_dir: str, paths: Sequence[str], params: Optional[Params] = None,
            checkpoint: str = "best") -> list[tuple[str, str, float]]:
  """The most probable label of each audio file.

  Args:
    model_dir: a folder either engine trained.
    paths: audio files and folders (searched recursively for audio files).
    params: parameters to use instead of model_dir's params.json.
    checkpoint: best (where model_dir keeps one, else the latest), last, or a path.

  Returns:
    (path, label, probability) per file, in the order of `paths`. Files that
    cannot be decoded are left out when params.on_bad_file is "skip".

  Raises:
    FileNotFoundError: a path that does not exist.
    decode.BadAudioError: an undecodable file, unless on_bad_file is "skip".
  """
  return top_labels(*probabilities(model_dir, paths, params, checkpoint))


def top_labels(files, probs, labels) -> list[tuple[str, str, float]]:
  best = np.argmax(probs, axis=1)
  return [(path, labels[i], float(p[i])) for path, i, p in zip(files, best, probs)]


def save_probabilities(path: str, files: Sequence[str], probs: np.ndarray,
                       labels: Sequence[str]) -> None:
  """Writes what `probabilities` returned to an .npz that `load_probabilities` reads, on any stack.

  Plain arrays only (no pickled objects), so numpy 1 and numpy 2 read each
  other's files: how `python -m audioclf migrate --report` compares a legacy
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
