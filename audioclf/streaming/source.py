"""Where a stream's hops come from: an audio file (as fast as it reads, or paced), or raw PCM16 on a pipe."""

from __future__ import annotations

import time
from typing import BinaryIO, Iterator

import numpy as np
import soundfile as sf

from audioclf.data import pcm
from audioclf.params import ParamError

SAMPLE_RATE = 16000
CONVERT = "sox IN -r 16000 -c 1 -b 16 OUT.wav"


def file_hops(path: str, hop_samples: int, realtime: bool = False) -> Iterator[np.ndarray]:
  """float32 hops [hop_samples] of a 16 kHz mono audio file; the last one padded with silence.

  Args:
    path: the file.
    hop_samples: samples per hop.
    realtime: pace the hops as a microphone would deliver them.

  Raises:
    ParamError: the file cannot be read, or is not 16 kHz mono.
  """
  try:
    info = sf.info(path)
  except (sf.LibsndfileError, RuntimeError, OSError, TypeError) as e:
    raise ParamError(f"--input={path}: not a readable audio file ({e})") from e
  if info.samplerate != SAMPLE_RATE or info.channels != 1:
    raise ParamError(f"--input={path}: {info.samplerate} Hz, {info.channels} channel(s); listen "
                     f"takes 16 kHz mono (convert it: {CONVERT})")
  start = time.monotonic()
  with sf.SoundFile(path) as f:
    for k, block in enumerate(f.blocks(hop_samples, dtype="float32", fill_value=0.0)):
      if realtime:
        time.sleep(max(0.0, start + k * hop_samples / SAMPLE_RATE - time.monotonic()))
      yield block


def pcm_hops(stream: BinaryIO, hop_samples: int) -> Iterator[np.ndarray]:
  """float32 hops of raw PCM16 mono (little-endian) from `stream`, the last padded with silence.

  Each hop is yielded as soon as its bytes arrive, as `arecord -f S16_LE -r
  16000 -c 1` writes them.

  Raises:
    ParamError: the stream ends inside a sample (an odd number of bytes).
  """
  size, total, pending = 2 * hop_samples, 0, b""
  while True:
    chunk = stream.read(size - len(pending))
    if not chunk:
      break
    total += len(chunk)
    pending += chunk
    if len(pending) == size:
      yield pcm.to_float(pending)
      pending = b""
  if total % 2:
    raise ParamError(f"--input=-: the stream ended after {total} bytes, an odd number: not "
                     "16-bit PCM (arecord -f S16_LE -r 16000 -c 1)")
  if pending:
    samples = pcm.to_float(pending)
    yield np.pad(samples, (0, hop_samples - samples.size))
