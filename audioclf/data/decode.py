"""An audio file to mono float32 at the target rate, by its format's decoder; BadAudioError."""

from __future__ import annotations

import ast
import re
from typing import Optional

import numpy as np

from audioclf.data import decoders

# BadAudioError's text: the path as Python quotes it (repr), then the reason, to the end of the line.
_BAD_AUDIO = re.compile(r"audioclf: bad audio file ('(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"): (.*)")


class BadAudioError(ValueError):
  """A file that is not usable audio: unreadable, empty, truncated, or not audio at all."""

  def __init__(self, path: str, reason: str):
    self.path, self.reason = path, reason
    super().__init__(f"audioclf: bad audio file {path!r}: {reason}")

  @classmethod
  def from_text(cls, text: str) -> Optional["BadAudioError"]:
    """The first BadAudioError whose text `text` holds, or None.

    A BadAudioError met inside the pipeline reaches the caller as a
    tf.errors.OpError whose message holds this text (`graph_errors.message`).
    """
    match = _BAD_AUDIO.search(text)
    return cls(ast.literal_eval(match.group(1)), match.group(2)) if match else None


def decode_file(path: str, sample_rate: int, quality: str = "HQ") -> np.ndarray:
  """The file's samples as its format's decoder reads them (`decoders.for_path`).

  Args:
    path: the audio file.
    sample_rate: the rate of the returned samples.
    quality: soxr quality recipe ("QQ", "LQ", "MQ", "HQ", "VHQ") where resampling is needed.

  Returns:
    float32 [samples], mono, in [-1, 1] for integer formats.

  Raises:
    BadAudioError: the file cannot be read, is truncated, holds no frames or
      holds non-finite samples.
  """
  return decoders.for_path(path).decode(path, sample_rate, quality)
