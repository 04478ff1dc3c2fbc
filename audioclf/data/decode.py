"""Audio file to mono float32 at the target rate: soundfile + soxr, and a native tf.audio fast path."""

from __future__ import annotations

import ast
import functools
import re
from typing import Optional

import numpy as np
import soundfile as sf
import soxr
import tensorflow as tf

from audioclf.data.pcm import PCM16, PCM16_SCALE

# libsndfile notes a chunk that claims more bytes than the file has as "data : N (should be M)".
_TRUNCATED = re.compile(r"^\s*\w+\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
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


# A canonical PCM16 mono WAV header as 22 little-endian int16 words; the
# words that vary per file (sizes, rate) are masked out and checked apart.
_HEADER = np.frombuffer(b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0" + b"\0" * 8 +
                        b"\x02\0\x10\0data\0\0\0\0", PCM16)
_FIXED = np.array([1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0], bool)
_FIXED_AT = np.flatnonzero(_FIXED)
HEADER_BYTES = 44


def native_wav_header_ok(header: bytes, file_size: int, sample_rate: int) -> bool:
  """Python twin of `native_wav`'s check, on the first 44 bytes and the file's size."""
  if len(header) < HEADER_BYTES or file_size <= HEADER_BYTES or file_size % 2:
    return False
  words = np.frombuffer(header[:HEADER_BYTES], PCM16)
  rate = int.from_bytes(header[24:28], "little")
  data_size = int.from_bytes(header[40:44], "little")
  return bool((words[_FIXED] == _HEADER[_FIXED]).all() and rate == sample_rate
              and data_size == file_size - HEADER_BYTES)


def native_wav(contents: tf.Tensor, sample_rate: int) -> tuple[tf.Tensor, tf.Tensor]:
  """Whether the native decode gives exactly what soundfile gives, and its samples.

  Native means a canonical 44-byte header (RIFF/WAVE, a 16-byte fmt chunk,
  then data), PCM 16 bit, one channel, the target rate, and a data chunk that
  fills the rest of the file: the samples are then the file's int16 words
  over 32768, as libsndfile scales them. Anything else goes to the soundfile
  path, which also tells a truncated file from a good one.

  Args:
    contents: scalar tf.string, the whole file.
    sample_rate: the rate the pipeline wants.

  Returns:
    (ok: scalar tf.bool, samples: float32 [samples], meaningful only where ok).
  """
  size = tf.strings.length(contents)
  odd = size % 2
  # One decode_raw serves the header check and the samples: this runs per
  # file. Its fixed length pads a short file with zeros (which fail the
  # check) and drops an odd last byte, so no branch is needed around it.
  words = tf.io.decode_raw(contents, tf.int16, fixed_length=tf.maximum(size - odd, HEADER_BYTES))
  # The header's 11 little-endian 32-bit fields against a canonical one, in
  # one comparison (few ops: each costs per file): the unchecked fields
  # masked out, the rate from the pipeline and the data size from the file's.
  expected, mask, data_field = _expected_header(sample_rate)
  fields = tf.bitcast(tf.reshape(words[:HEADER_BYTES // 2], [11, 2]), tf.int32)
  data_size = size - HEADER_BYTES
  ok = (tf.reduce_all(tf.equal(fields * mask - expected, data_field * data_size))
        & (size > HEADER_BYTES) & tf.equal(odd, 0))
  return ok, tf.cast(words[HEADER_BYTES // 2:], tf.float32) * PCM16_SCALE


@functools.lru_cache(maxsize=None)
def traced_native_wav(sample_rate: int):
  """`native_wav` at `sample_rate` as a tf.function, traced once per process.

  The cold pass builds it into the function every example runs; tracing it
  anew for each dataset would cost more than the call.
  """
  return tf.function(lambda contents: native_wav(contents, sample_rate),
                     input_signature=[tf.TensorSpec([], tf.string)], autograph=False)


@functools.lru_cache(maxsize=None)
def _expected_header(sample_rate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`native_wav`'s check as int32 fields: (expected, mask, where the data size goes).

  The same fields as `native_wav_header_ok`: the fixed words (_FIXED), the
  rate and the data size; the RIFF size and the byte rate are not checked.
  """
  mask = np.array(_FIXED.reshape(11, 2).all(axis=1), np.int32)
  mask[6] = 1  # The rate.
  expected = _HEADER.view("<i4").astype(np.int32) * mask
  expected[6] = sample_rate
  data_field = np.zeros(11, np.int32)
  data_field[10] = 1
  mask[10] = 1  # The data size: fields * mask - expected leaves it, to equal data_field * size.
  return expected, mask, data_field


def read_native_wav(path: str) -> np.ndarray:
  """`native_wav`'s samples for Python callers, from a file whose header passed the check."""
  return np.fromfile(path, PCM16, offset=HEADER_BYTES).astype(np.float32) * PCM16_SCALE
