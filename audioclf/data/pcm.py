"""PCM16 samples: how they are stored, and the scale that makes them float32 as libsndfile does."""

import numpy as np

PCM16 = "<i2"  # Little-endian int16: a WAV's words, and a split's samples where all are PCM16.
PCM16_SCALE = np.float32(1 / 32768)  # Exact (a power of two): int16 * scale is libsndfile's float.


def to_float(words, dtype=np.float32) -> np.ndarray:
  """PCM16 `words` (bytes, or an int16 array) as `dtype` samples in [-1, 1)."""
  if isinstance(words, (bytes, bytearray)):
    words = np.frombuffer(words, PCM16)
  return words.astype(dtype) * np.asarray(PCM16_SCALE, dtype)


def to_words(samples: np.ndarray) -> np.ndarray:
  """Float `samples` in [-1, 1] as PCM16 words, clipped: times 32767, as libsndfile writes them."""
  return np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)
