"""The `_background_noise_` recordings: noise colours, mains hum, babble of the generator's voices.

    <out>/_background_noise_/<name>.wav   16 kHz, mono, PCM_16, --noise_seconds long

white, pink and brown noise, mains hum at 50 Hz and at 60 Hz (with harmonics
and a slowly wandering level), and babble: several of the generator's voices
saying words that are not among the dataset's words, overlapping. A folder scan
skips `_background_noise_` as a label; audioclf mixes excerpts of these into
training examples (--noise_prob, --noise_snr_db).
"""

from __future__ import annotations

import concurrent.futures
import zlib
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from audioclf.data import pcm
from audioclf.synthesis import espeak, render, speakers, vocabulary
from audioclf.synthesis.settings import NOISE_DIR, SAMPLE_RATE

# Each recording's RMS, in dBFS: a steady background well under the words' peaks.
NOISE_RMS_DBFS = -26.0
BABBLE_VOICES = 6  # Talkers overlapping at any time.


def write(root: Path, words, seed: int, voices: list[str], seconds: float,
          workers: int) -> list[str]:
  """Writes the background noise recordings under root/NOISE_DIR; returns their relative paths.

  Each recording has its own random stream keyed by its name, so adding one
  leaves the others' bytes alone.
  """
  n = int(round(seconds * SAMPLE_RATE))
  makers = {
      "white_noise": lambda rng: coloured_noise(rng, n, 0.0),
      "pink_noise": lambda rng: coloured_noise(rng, n, 1.0),
      "brown_noise": lambda rng: coloured_noise(rng, n, 2.0),
      "hum_50hz": lambda rng: hum(rng, n, 50.0),
      "hum_60hz": lambda rng: hum(rng, n, 60.0),
      "babble": lambda rng: babble(rng, n, words, voices, workers),
  }
  (root / NOISE_DIR).mkdir()
  rel_paths = []
  for name, make in makers.items():
    x = make(np.random.default_rng([seed, 3, zlib.crc32(name.encode())]))
    x *= 10 ** (NOISE_RMS_DBFS / 20) / np.sqrt(np.mean(x ** 2))
    rel = f"{NOISE_DIR}/{name}.wav"
    sf.write(root / rel, pcm.to_words(x), SAMPLE_RATE, subtype="PCM_16", format="WAV")
    rel_paths.append(rel)
  (root / NOISE_DIR / "README.md").write_text(
      "Background noise written by audioclf synthesize --background_noise: "
      f"{', '.join(makers)}; {seconds:g} s each at {SAMPLE_RATE} Hz, "
      f"{NOISE_RMS_DBFS:g} dBFS RMS.\n")
  return rel_paths


def coloured_noise(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
  """Gaussian noise whose power falls as 1/f**exponent (0 white, 1 pink, 2 brown), from 20 Hz."""
  spec = np.fft.rfft(rng.standard_normal(n))
  freqs = np.fft.rfftfreq(n, 1.0 / SAMPLE_RATE)
  # Below 20 Hz brown noise would be mostly a wandering DC offset no microphone passes.
  spec[freqs < 20.0] = 0.0
  spec[freqs >= 20.0] /= freqs[freqs >= 20.0] ** (exponent / 2)
  return np.fft.irfft(spec, n)


def hum(rng: np.random.Generator, n: int, mains_hz: float) -> np.ndarray:
  """Mains hum: the fundamental and its harmonics, a slowly wandering level, a faint noise floor."""
  t = np.arange(n) / SAMPLE_RATE
  x = np.zeros(n)
  # The second harmonic is the loudest in transformer hum (magnetostriction), then they fade.
  for k, amp in enumerate((0.6, 1.0, 0.5, 0.35, 0.2, 0.12, 0.08, 0.05), start=1):
    level, phase = rng.uniform(0.7, 1.3), rng.uniform(0, 2 * np.pi)
    x += amp * level * np.sin(2 * np.pi * k * mains_hz * t + phase)
  x *= 1.0 + 0.25 * np.sin(2 * np.pi * rng.uniform(0.05, 0.2) * t + rng.uniform(0, 2 * np.pi))
  floor = coloured_noise(rng, n, 1.0)
  return x / np.sqrt(np.mean(x ** 2)) + 0.03 * floor / np.sqrt(np.mean(floor ** 2))


def babble(rng: np.random.Generator, n: int, words, voices: list[str], workers: int) -> np.ndarray:
  """Talkers of the generator's voices saying filler words, overlapping, none of them a class."""
  taken = {w.lower() for w in words}
  fillers = [w for w in vocabulary.BABBLE_WORDS if w not in taken]
  talkers = [[voices[int(i)], int(rng.integers(speakers.RATE_WPM[0], speakers.RATE_WPM[1] + 1)),
              int(rng.integers(speakers.PITCH[0], speakers.PITCH[1] + 1)),
              int(rng.integers(speakers.PITCH_RANGE[0], speakers.PITCH_RANGE[1] + 1)),
              int(rng.integers(1, 2**31 - 1))]
             for i in rng.choice(len(voices), min(BABBLE_VOICES, len(voices)), replace=False)]
  # One espeak process per word, every talker's take of it (as the clips are made).
  with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as ex:
    said = list(ex.map(lambda w: espeak.say(w, talkers), fillers))
  out = np.zeros(n)
  for t in range(len(talkers)):
    takes = [soxr.resample(pcm.to_float(raws[t], np.float64), header["sample_rate"],
                           SAMPLE_RATE) for header, raws in said]
    gain = 10 ** (rng.uniform(-6.0, 0.0) / 20)
    at = int(rng.integers(0, SAMPLE_RATE))
    while at < n:
      take = takes[int(rng.integers(len(takes)))]
      end = min(n, at + len(take))
      out[at:end] += gain * take[:end - at] / np.max(np.abs(take))
      at = end + int(rng.uniform(0.05, 0.4) * SAMPLE_RATE)  # A breath between words.
  return out
