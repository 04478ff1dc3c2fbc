"""Long recordings: sliding windows streamed from the file, and the segments where a label is heard.

A file longer than one clip is read block by block (soundfile) and resampled
as it streams (soxr.ResampleStream), so an hour-long file never sits in memory
whole; windows of one clip every `hop` seconds are classified in batches.

The segment rule, per label (a model's clip holds one event, e.g. a word):

  1. A run is a stretch of consecutive windows whose probability for the
     label stays at or above RELEASE * threshold and reaches `threshold` in
     at least one of them (hysteresis: a dip below the threshold does not
     split a word, a window that only brushes it does not start one).
  2. A run of fewer than MIN_SPAN clips' worth of windows (at least one) is
     dropped: an event is heard by every window that holds it, while the
     fragment of a neighbouring word at a window's edge fools only a window
     or two.
  3. Its span lies between two instants: the end of the run's first window
     (the first moment a window has heard enough of the event) and the start
     of its last window (the last moment one still holds enough of it), in
     whichever order they come. A model that needs the whole event in its
     window fires from the window that ends where the event ends to the one
     that starts where it starts: the span is then the event exactly. A model
     that fires on any good part of it (one trained on words at random
     offsets, as the demo is) fires from a window holding just the onset to
     one holding just the ending: the span is then the event less those parts,
     so it starts a little late (0.05 to 0.19 s on spoken words in the test). Its
     probability is the run's peak.
  4. Labels in `background` (silence, unknown) are never reported.

With a hop of 0.1 s, word onsets come out within 0.25 s (tested on spoken words
placed at known offsets); the default hop of half a clip is 5x cheaper and
places them to about half a hop.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import soundfile as sf
import soxr
from absl import logging

from audioclf.data import decode
from audioclf.model import build as models
from audioclf.model import model_dir as model_dir_lib
from audioclf.params import ParamError

RELEASE = 0.5  # A run continues while the probability stays above this share of the threshold.
MIN_SPAN = 0.3  # Shortest run kept, in clips (at least one window).
BLOCK_SECONDS = 10.0  # Audio decoded per read.


@dataclasses.dataclass(frozen=True)
class Segment:
  start: float  # Seconds from the start of the file.
  end: float
  label: str
  peak: float  # The highest probability of the label in the segment's windows.


def duration(path: str) -> float:
  """The length of an audio file in seconds, from its header.

  Raises:
    decode.BadAudioError: the file cannot be opened.
  """
  try:
    info = sf.info(path)
  except (sf.LibsndfileError, RuntimeError, OSError, TypeError) as e:
    raise decode.BadAudioError(path, str(e)) from e
  return info.frames / info.samplerate


def is_long(path: str, params) -> bool:
  """Longer than one clip (by its header); an unreadable file is left to predict's handling."""
  try:
    return duration(path) > params.clip_seconds + 1.0 / params.sample_rate
  except decode.BadAudioError:
    return False


def stream(path: str, sample_rate: int, quality: str = "HQ",
           block_seconds: float = BLOCK_SECONDS) -> Iterator[np.ndarray]:
  """The file as mono float32 blocks at sample_rate, decoded and resampled block by block.

  Raises:
    decode.BadAudioError: the file cannot be read, or holds NaN or infinite samples.
  """
  try:
    with sf.SoundFile(path) as f:
      rate = f.samplerate
      resampler = (soxr.ResampleStream(rate, sample_rate, 1, dtype="float32", quality=quality)
                   if rate != sample_rate else None)
      for block in f.blocks(blocksize=max(1, int(block_seconds * rate)), dtype="float32",
                            always_2d=True):
        # Averaging keeps the level of a signal present on every channel, as decode does.
        mono = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0]
        if not np.isfinite(mono).all():
          raise decode.BadAudioError(path, "holds NaN or infinite samples")
        yield resampler.resample_chunk(mono, last=False) if resampler else mono
      if resampler:
        yield resampler.resample_chunk(np.zeros(0, np.float32), last=True)
  except decode.BadAudioError:
    raise
  except (sf.LibsndfileError, RuntimeError, OSError, TypeError) as e:
    raise decode.BadAudioError(path, str(e)) from e


def windows(blocks: Iterable[np.ndarray], clip: int, hop: int) -> Iterator[tuple[int, np.ndarray]]:
  """(start sample, clip samples) every `hop` samples over a stream of blocks.

  Holds at most one clip plus one block. The last window that starts before
  the audio ends, less one hop, is zero-padded: the tail is always heard.
  """
  if not 0 < hop <= clip:
    raise ValueError(f"the hop must be in (0, clip], got {hop} samples for a {clip}-sample clip")
  buffer, offset, start = np.zeros(0, np.float32), 0, 0  # offset: the sample buffer[0] is.
  for block in blocks:
    buffer = np.concatenate([buffer, np.asarray(block, np.float32)])
    while start + clip <= offset + len(buffer):
      yield start, buffer[start - offset:start - offset + clip].copy()
      start += hop
    buffer, offset = buffer[start - offset:], start
  end = offset + len(buffer)
  while start < end - clip + hop or start == 0:
    window = buffer[start - offset:start - offset + clip]
    yield start, np.pad(window, (0, clip - len(window)))
    start += hop
    if start >= end:
      break


def window_probabilities(predict: Callable[[np.ndarray], np.ndarray], path: str, clip: int,
                         hop: int, sample_rate: int, quality: str = "HQ",
                         batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
  """Classifies every window of a file, streamed.

  Returns:
    (window starts in seconds [windows], probabilities [windows, classes]).
  """
  starts, probabilities, batch, batch_starts = [], [], [], []

  def flush():
    probabilities.append(np.asarray(predict(np.stack(batch)), np.float32))
    starts.extend(batch_starts)
    batch.clear()
    batch_starts.clear()

  for start, window in windows(stream(path, sample_rate, quality), clip, hop):
    batch.append(window)
    batch_starts.append(start)
    if len(batch) == batch_size:
      flush()
  if batch:
    flush()
  return np.asarray(starts, np.float64) / sample_rate, np.concatenate(probabilities)


def find_segments(probabilities: np.ndarray, starts: np.ndarray, labels: Sequence[str],
                  clip_seconds: float, threshold: float = 0.5,
                  background: Sequence[str] = (), length: Optional[float] = None
                  ) -> list[Segment]:
  """The segments where each label is heard, by the rule in the module docstring.

  Args:
    probabilities: [windows, classes], one row per window.
    starts: [windows], each window's start in seconds, evenly spaced.
    labels: the label of each class.
    clip_seconds: the window length.
    threshold: the probability a run must reach.
    background: labels never reported.
    checkpoint: best (where model_dir keeps one, else the latest), last, or a path.
    length: the recording's length in seconds; segments end there at the latest.

  Returns:
    Segments sorted by start.
  """
  hop = float(starts[1] - starts[0]) if len(starts) > 1 else clip_seconds
  min_windows = max(1, math.ceil(MIN_SPAN * clip_seconds / hop - 1e-9))
  found = []
  for c, label in enumerate(labels):
    if label in background:
      continue
    p = probabilities[:, c]
    # Maximal stretches of windows at or above the release level...
    above = np.concatenate([[False], p >= RELEASE * threshold, [False]])
    edges = np.flatnonzero(above[1:] != above[:-1])
    for i, j in zip(edges[::2], edges[1::2] - 1):
      peak = float(p[i:j + 1].max())
      # ...that reach the threshold, over enough windows.
      if peak < threshold or j - i + 1 < min_windows:
        continue
      heard_from, heard_until = starts[i] + clip_seconds, starts[j]
      start, end = min(heard_from, heard_until), max(heard_from, heard_until)
      if length is not None:
        end = min(end, length)
      found.append(Segment(round(float(start), 3), round(float(end), 3), label, peak))
  return sorted(found, key=lambda s: (s.start, s.label))


def _clip_and_hop(params, hop_seconds: Optional[float]) -> tuple[int, int]:
  """The clip and the hop between windows, in samples; ParamError for a hop outside (0, clip]."""
  clip = params.clip_samples
  hop = int(round((hop_seconds or params.clip_seconds / 2) * params.sample_rate))
  if not 0 < hop <= clip:
    raise ParamError(f"--hop_seconds={hop_seconds}: must be in (0, clip_seconds="
                     f"{params.clip_seconds}]")
  return clip, hop


def detect(model_dir: str, paths: Sequence[str], params=None, hop_seconds: Optional[float] = None,
           threshold: float = 0.5, background: Sequence[str] = (),
           checkpoint: str = "best") -> list[dict]:
  """The segments of each long audio file, with a model_dir from either engine.

  Args:
    model_dir: a folder either engine trained.
    paths: audio files (predict.audio_files expands folders).
    params: parameters to use instead of model_dir's params.json.
    hop_seconds: the step between windows; default half a clip.
    threshold: see find_segments.
    background: labels never reported.
    checkpoint: best (where model_dir keeps one, else the latest), last, or a path.

  Returns:
    Per file, {"file", "duration", "segments": [Segment, ...]}. Files that
    cannot be decoded are left out when params.on_bad_file is "skip".

  Raises:
    decode.BadAudioError: an undecodable file, unless on_bad_file is "skip".
  """
  # A hop the clip cannot take is refused before the model is built and restored.
  clip, hop = _clip_and_hop(params or model_dir_lib.read_params(model_dir), hop_seconds)
  model, params, labels = model_dir_lib.load_model(model_dir, params, checkpoint)
  predict = models.predict_fn(model)
  results = []
  for path in paths:
    try:
      starts, probabilities = window_probabilities(
          predict, path, clip, hop, params.sample_rate, params.resample_quality,
          params.batch_size)
      length = duration(path)
    except decode.BadAudioError as e:
      if params.on_bad_file != "skip":
        raise
      logging.warning("audioclf: skipping %s", e)
      continue
    results.append({"file": path, "duration": round(length, 3),
                    "segments": find_segments(probabilities, starts, labels, params.clip_seconds,
                                              threshold, background, length)})
  return results
