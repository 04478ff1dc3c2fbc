"""The word clips: which speaker says which word into which file (Take), and writing them.

    <root>/<word>/<speaker>_nohash_<n>.wav        16 kHz, mono, PCM_16, exactly 1.0 s
    <root>/_unknown_/<speaker>_nohash_<n>.wav     the same, each saying one of the other words

Each clip's jitter and rendering draw from random streams keyed by (seed,
stream, its folder, its number), so a clip's bytes depend on nothing else.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np
import soundfile as sf

from audioclf.synthesis import espeak, render, speakers
from audioclf.synthesis.settings import SAMPLE_RATE, UNKNOWN_DIR


@dataclasses.dataclass
class Take:
  """One clip: the word said, the file it goes to (relative to the root), and its draws."""

  word: str
  rel: str
  job: list  # espeak's settings for it (speakers.job)
  rng: np.random.Generator  # its rendering's draws (render.clip)


def word_takes(words: Sequence[str], n: int, seed: int, pool: list[dict],
               streams: tuple[int, int]) -> list[Take]:
  """n clips of each word, word by word: clip i is speaker i % len(pool)'s.

  Args:
    words: the words, each its own folder.
    n: clips per word.
    seed: the dataset's seed.
    pool: the speakers (speakers.pool).
    streams: the random streams of the takes' jitter and of their rendering.
  """
  return [_take(w, w, i, seed, pool, streams) for w in words for i in range(n)]


def unknown_takes(unknown: Sequence[str], n: int, seed: int, pool: list[dict],
                  streams: tuple[int, int, int]) -> list[Take]:
  """n clips in UNKNOWN_DIR, each unknown word about as often, in an order drawn from streams[0].

  Clip i is speaker i % len(pool)'s, as in a word's folder; the shuffle spreads each unknown
  word over the speakers.
  """
  order = np.random.default_rng([seed, streams[0]]).permutation(n)
  return [_take(unknown[int(j) % len(unknown)], UNKNOWN_DIR, i, seed, pool, streams[1:])
          for i, j in enumerate(order)]


def _take(word: str, folder: str, i: int, seed: int, pool: list[dict],
          streams: Sequence[int]) -> Take:
  speaker = pool[i % len(pool)]
  return Take(word, f"{folder}/{speaker['id']}_nohash_{i // len(pool)}.wav",
              speakers.job(speaker, speakers.clip_rng(seed, folder, i, streams[0])),
              speakers.clip_rng(seed, folder, i, streams[1]))


def write(root: Path, takes: Sequence[Take], bar, workers: int) -> str:
  """Writes every take under root, one espeak process per word, `workers` at a time.

  Args:
    root: the dataset's folder being written.
    takes: the clips; their folders are created.
    bar: a tqdm bar, updated per clip written.
    workers: espeak processes at a time.

  Returns:
    The espeak-ng version that spoke them.
  """
  by_word: dict[str, list[Take]] = {}
  for take in takes:
    by_word.setdefault(take.word, []).append(take)
  version = ""
  with concurrent.futures.ThreadPoolExecutor(max(1, min(len(by_word), workers))) as ex:
    futures = {word: ex.submit(espeak.say, word, [t.job for t in group])
               for word, group in by_word.items()}
    try:
      for word, group in by_word.items():
        header, raws = futures[word].result()
        version = header["espeak"]
        for take, raw in zip(group, raws):
          (root / take.rel).parent.mkdir(exist_ok=True)
          audio = render.clip(raw, header["sample_rate"], take.rng)
          sf.write(root / take.rel, audio, SAMPLE_RATE, subtype="PCM_16", format="WAV")
          bar.update()
    finally:
      for f in futures.values():
        f.cancel()
  return version
