"""PCM16 samples: how they are stored, and the scale that makes them float32 as libsndfile does."""

import numpy as np

PCM16 = "<i2"  # Little-endian int16: a WAV's words, and a split's samples where all are PCM16.
PCM16_SCALE = np.float32(1 / 32768)  # Exact (a power of two): int16 * scale is libsndfile's float.
