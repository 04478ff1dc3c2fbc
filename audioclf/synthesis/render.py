"""A spoken word made a 1 s clip: resampled, levelled, placed at a random offset, over noise."""

from __future__ import annotations

import numpy as np
import soxr

from audioclf.data import pcm
from audioclf.synthesis.settings import CLIP_SAMPLES, MAX_WORD_SECONDS, SAMPLE_RATE

SNR_DB = (15.0, 40.0)
PEAK_DBFS = (-18.0, -1.0)


def clip(raw: np.ndarray, raw_rate: int, rng: np.random.Generator) -> np.ndarray:
  """The word `raw` (int16 at raw_rate) in a CLIP_SAMPLES clip at SAMPLE_RATE, as int16.

  A random peak level, a random position inside the window, and white or pink
  noise at a random SNR, so a classifier has to generalize rather than memorize.
  """
  speech = soxr.resample(pcm.to_float(raw, np.float64), raw_rate, SAMPLE_RATE)
  speech = speech[:int(MAX_WORD_SECONDS * SAMPLE_RATE)]
  peak_db = rng.uniform(*PEAK_DBFS)
  speech *= 10 ** (peak_db / 20) / np.max(np.abs(speech))
  offset = int(rng.integers(0, CLIP_SAMPLES - len(speech) + 1))

  noise = rng.standard_normal(CLIP_SAMPLES)
  if rng.random() < 0.5:
    # Pink: 1/f power, closer to room and street noise than white.
    spec = np.fft.rfft(noise)
    spec[0] = 0.0
    spec[1:] /= np.sqrt(np.arange(1, len(spec)))
    noise = np.fft.irfft(spec, CLIP_SAMPLES)
  # SNR against the word itself, not the whole second, so short words are not drowned.
  speech_rms = np.sqrt(np.mean(speech ** 2))
  noise *= speech_rms / np.sqrt(np.mean(noise ** 2)) / 10 ** (rng.uniform(*SNR_DB) / 20)

  out = noise
  out[offset:offset + len(speech)] += speech
  return pcm.to_words(out)
