"""Audio file to mono float32 at the target rate: soundfile + soxr, and a native tf.audio fast path."""

from __future__ import annotations

import re

import numpy as np
import soundfile as sf
import soxr
import tensorflow as tf

# libsndfile notes a chunk that claims more bytes than the file has as "data : N (should be M)".
_TRUNCATED = re.compile(r"^\s*\w+\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)


class BadAudioError(ValueError):
  """A file that is not usable audio: unreadable, empty, truncated, or not audio at all."""

  def __init__(self, path: str, reason: str):
    self.path, self.reason = path, reason
    super().__init__(f"audioclf: bad audio file {path!r}: {reason}")


def decode_file(path: str, sample_rate: int, quality: str = "HQ") -> np.ndarray:
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
  # Averaging keeps the level of a signal present on every channel; summing would clip.
  mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
  if not np.isfinite(mono).all():
    raise BadAudioError(path, "holds NaN or infinite samples")
  if rate != sample_rate:
    mono = soxr.resample(mono, rate, sample_rate, quality=quality)
  return np.ascontiguousarray(mono, dtype=np.float32)


def _check_not_truncated(path: str, log: str) -> None:
  for claimed, actual in _TRUNCATED.findall(log):
    if int(actual) < int(claimed):
      raise BadAudioError(path, f"truncated: a chunk claims {claimed} bytes, the file has {actual}")


def native_wav_ok(contents: tf.Tensor, sample_rate: int) -> tf.Tensor:
  """True where tf.audio.decode_wav gives exactly what soundfile gives, at `sample_rate`.

  That is a canonical 44-byte header (RIFF/WAVE, a 16-byte fmt chunk, then
  data), PCM 16 bit, one channel, the target rate, and a data chunk that
  fills the rest of the file: decode_wav's float is int16 / 32768, as is
  libsndfile's. Anything else goes to the soundfile path, which also tells a
  truncated file from a good one.

  Args:
    contents: scalar tf.string, the whole file.
    sample_rate: the rate the pipeline wants.

  Returns:
    A scalar tf.bool.
  """
  # decode_raw has no uint32; int32 is exact for every size a WAV can hold (< 2 GiB).
  def u32(offset):
    return tf.cast(tf.io.decode_raw(tf.strings.substr(contents, offset, 4), tf.int32)[0], tf.int64)

  def u16(offset):
    return tf.cast(tf.io.decode_raw(tf.strings.substr(contents, offset, 2), tf.uint16)[0], tf.int64)

  def check():
    return tf.reduce_all(tf.stack([
        tf.equal(tf.strings.substr(contents, 0, 4), b"RIFF"),
        tf.equal(tf.strings.substr(contents, 8, 8), b"WAVEfmt "),
        tf.equal(u32(16), 16),  # fmt chunk size.
        tf.equal(u16(20), 1),  # WAVE_FORMAT_PCM.
        tf.equal(u16(22), 1),  # Channels.
        tf.equal(u32(24), sample_rate),
        tf.equal(u16(34), 16),  # Bits per sample.
        tf.equal(tf.strings.substr(contents, 36, 4), b"data"),
        tf.equal(u32(40), size - 44),  # Not truncated, nothing after the samples.
        tf.greater(size, 44),
    ]))

  size = tf.cast(tf.strings.length(contents), tf.int64)
  # substr past the end raises, so only look inside a file long enough to hold the header.
  return tf.cond(size > 44, check, lambda: tf.constant(False))


def native_decode_wav(contents: tf.Tensor) -> tf.Tensor:
  """float32 [samples] from a file for which `native_wav_ok` holds."""
  return tf.audio.decode_wav(contents, desired_channels=1).audio[:, 0]
