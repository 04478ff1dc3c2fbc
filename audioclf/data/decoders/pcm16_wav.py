"""Canonical PCM16 mono WAVs at the target rate: their words over 32768, natively in the graph.

Canonical means a 44-byte header (RIFF/WAVE, a 16-byte fmt chunk, then
data), PCM 16 bit, one channel, the target rate, and a data chunk that
fills the rest of the file: the samples are then the file's int16 words
over 32768, as libsndfile scales them (the same bits). Any other .wav
(other rates, multichannel, anything odd or broken) goes to libsndfile,
which also tells a truncated file from a good one.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from audioclf.data import decoders
from audioclf.data.decoders import libsndfile
from audioclf.data.pcm import PCM16, PCM16_SCALE

# A canonical PCM16 mono WAV header as 22 little-endian int16 words; the
# words that vary per file (sizes, rate) are masked out and checked apart.
_HEADER = np.frombuffer(b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0" + b"\0" * 8 +
                        b"\x02\0\x10\0data\0\0\0\0", PCM16)
_FIXED = np.array([1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0], bool)
HEADER_BYTES = 44


def header_ok(header: bytes, file_size: int, sample_rate: int) -> bool:
  """Python twin of `native_wav`'s check, on the first 44 bytes and the file's size."""
  if len(header) < HEADER_BYTES or file_size <= HEADER_BYTES or file_size % 2:
    return False
  words = np.frombuffer(header[:HEADER_BYTES], PCM16)
  rate = int.from_bytes(header[24:28], "little")
  data_size = int.from_bytes(header[40:44], "little")
  return bool((words[_FIXED] == _HEADER[_FIXED]).all() and rate == sample_rate
              and data_size == file_size - HEADER_BYTES)


def words(path: str, file_size: int, sample_rate: int, header_only: bool = False):
  """The sample bytes of a canonical file (b"" with header_only), else None (unreadable too)."""
  try:
    with open(path, "rb") as f:
      head = f.read(HEADER_BYTES)  # One open per file: header, then samples.
      if header_ok(head, file_size, sample_rate):
        return b"" if header_only else f.read()
  except OSError:
    pass  # Decoding says what is wrong with it, or skips it.
  return None


def decode(path: str, sample_rate: int, quality: str = "HQ") -> np.ndarray:
  """A canonical file's words over 32768; any other .wav through libsndfile."""
  try:
    size = os.path.getsize(path)
  except OSError:
    size = 0
  data = words(path, size, sample_rate)
  if data is None:
    return libsndfile.decode(path, sample_rate, quality)
  # PCM16 to float32 times a power of two: exact, the bits libsndfile gives.
  return np.frombuffer(data, PCM16).astype(np.float32) * PCM16_SCALE


def native_wav(contents, sample_rate: int):
  """Whether `contents` (scalar tf.string, a whole file) is canonical, and its samples.

  Returns:
    (ok: scalar tf.bool, samples: float32 [samples], meaningful only where ok).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  size = tf.strings.length(contents)
  odd = size % 2
  # One decode_raw serves the header check and the samples: this runs per
  # file. Its fixed length pads a short file with zeros (which fail the
  # check) and drops an odd last byte, so no branch is needed around it.
  raw = tf.io.decode_raw(contents, tf.int16, fixed_length=tf.maximum(size - odd, HEADER_BYTES))
  # The header's 11 little-endian 32-bit fields against a canonical one, in
  # one comparison (few ops: each costs per file): the unchecked fields
  # masked out, the rate from the pipeline and the data size from the file's.
  expected, mask, data_field = _expected_header(sample_rate)
  fields = tf.bitcast(tf.reshape(raw[:HEADER_BYTES // 2], [11, 2]), tf.int32)
  data_size = size - HEADER_BYTES
  ok = (tf.reduce_all(tf.equal(fields * mask - expected, data_field * data_size))
        & (size > HEADER_BYTES) & tf.equal(odd, 0))
  return ok, tf.cast(raw[HEADER_BYTES // 2:], tf.float32) * PCM16_SCALE


@functools.lru_cache(maxsize=None)
def traced(sample_rate: int):
  """`native_wav` at `sample_rate` as a tf.function, traced once per process.

  The cold pass builds it into the function every example runs; tracing it
  anew for each dataset would cost more than the call.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.function(lambda contents: native_wav(contents, sample_rate),
                     input_signature=[tf.TensorSpec([], tf.string)], autograph=False)


@functools.lru_cache(maxsize=None)
def _expected_header(sample_rate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`native_wav`'s check as int32 fields: (expected, mask, where the data size goes).

  The same fields as `header_ok`: the fixed words (_FIXED), the rate and the
  data size; the RIFF size and the byte rate are not checked.
  """
  mask = np.array(_FIXED.reshape(11, 2).all(axis=1), np.int32)
  mask[6] = 1  # The rate.
  expected = _HEADER.view("<i4").astype(np.int32) * mask
  expected[6] = sample_rate
  data_field = np.zeros(11, np.int32)
  data_field[10] = 1
  mask[10] = 1  # The data size: fields * mask - expected leaves it, to equal data_field * size.
  return expected, mask, data_field


DECODER = decoders.register(decoders.Decoder("pcm16_wav", 1, (".wav", ".wave"), decode, traced))
