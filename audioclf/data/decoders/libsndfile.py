"""The default decoder: any format libsndfile reads, mixed to mono, resampled with soxr."""

from __future__ import annotations

import re

import numpy as np
import soundfile as sf
import soxr

from audioclf.data import decoders
from audioclf.data.decode import BadAudioError

# libsndfile notes a chunk that claims more bytes than the file has as "data : N (should be M)".
_TRUNCATED = re.compile(r"^\s*\w+\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)


def decode(path: str, sample_rate: int, quality: str = "HQ") -> np.ndarray:
  """Reads any format libsndfile knows, mixes to mono and resamples with soxr.

  Args:
    path: the audio file.
    sample_rate: the rate of the returned samples.
    quality: soxr quality recipe ("QQ", "LQ", "MQ", "HQ", "VHQ").

  Returns:
    float32 [samples], in [-1, 1] for integer formats.

  Raises:
    BadAudioError: the file cannot be read, is truncated, holds no frames or
      holds non-finite samples.
  """
  try:
    with sf.SoundFile(path) as f:
      _check_not_truncated(path, f.extra_info)
      expected = f.frames
      data = f.read(dtype="float32", always_2d=True)
      rate = f.samplerate
  except BadAudioError:
    raise
  except (sf.LibsndfileError, RuntimeError, OSError, TypeError) as e:
    raise BadAudioError(path, str(e).replace(f"Error opening {path!r}: ", "")) from e
  if data.shape[0] == 0:
    raise BadAudioError(path, "holds no audio frames")
  if data.shape[0] < expected:
    raise BadAudioError(path, f"truncated: header says {expected} frames, read {data.shape[0]}")
  # Averaging keeps the level of a signal present on every channel; summing
  # would clip. One vector add per channel: mean(axis=1) over the short,
  # strided axis costs 10x more, and a BLAS matrix-vector product leaves
  # OpenBLAS threads spinning, which doubles the CPU a decode burns.
  mono = data[:, 0].copy()
  for channel in range(1, data.shape[1]):
    mono += data[:, channel]
  if data.shape[1] > 1:
    mono /= np.float32(data.shape[1])
  if not np.isfinite(mono).all():
    raise BadAudioError(path, "holds NaN or infinite samples")
  if rate != sample_rate:
    mono = soxr.resample(mono, rate, sample_rate, quality=quality)
  return np.ascontiguousarray(mono, dtype=np.float32)


def _check_not_truncated(path: str, log: str) -> None:
  for claimed, actual in _TRUNCATED.findall(log):
    if int(actual) < int(claimed):
      raise BadAudioError(path, f"truncated: a chunk claims {claimed} bytes, the file has {actual}")


DECODER = decoders.register(decoders.Decoder("libsndfile", 1, (), decode))
