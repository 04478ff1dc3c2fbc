"""python -m audioclf.predict --model_dir=runs/demo/keras clip.wav more_clips/ ...

Classifies audio files, or every audio file under a folder, with a model_dir
from either engine; prints `path<TAB>label<TAB>probability` per file.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
from absl import app
from absl import flags
from absl import logging

from audioclf import cli
from audioclf import decode
from audioclf import model_dir as model_dir_lib
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

  The same window input_fn gives evaluation, so a file scores here as it
  scored there.
  """
  start = max(len(samples) - clip_samples, 0) // 2
  window = samples[start:start + clip_samples]
  return np.pad(window, (0, clip_samples - len(window))).astype(np.float32)


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
  model, params, labels = model_dir_lib.load_model(model_dir, params)
  files = audio_files(paths)
  results = []
  for start in range(0, len(files), params.batch_size):
    batch_files, waveforms = [], []
    for path in files[start:start + params.batch_size]:
      try:
        samples = decode.decode_file(path, params.sample_rate, params.resample_quality)
      except decode.BadAudioError as e:
        if params.on_bad_file != "skip":
          raise
        logging.warning("audioclf: skipping %s", e)
        continue
      batch_files.append(path)
      waveforms.append(center_clip(samples, params.clip_samples))
    if not waveforms:
      continue
    probabilities = model.predict_on_batch(np.stack(waveforms))
    for path, p in zip(batch_files, probabilities):
      best = int(np.argmax(p))
      results.append((path, labels[best], float(p[best])))
  return results


def main(argv):
  if len(argv) < 2:
    raise app.UsageError("give audio files or folders to classify")
  for path, label, probability in predict(FLAGS.model_dir, argv[1:], cli.params_for_model_dir()):
    print(f"{path}\t{label}\t{probability:.4f}", flush=True)


def run():
  cli.define_model_dir_flags()
  flags.mark_flag_as_required("model_dir")
  cli.run(main)


if __name__ == "__main__":
  run()
