"""The speakers: espeak-ng's English voices, each with a rate and pitch, and each clip's jitter.

A "speaker" is a fixed combination of English voice/variant, speaking rate,
pitch and pitch range; its 8-hex-char id is a hash of those parameters and the
same speakers say every word, so the usual Speech Commands speaker-hash split
keeps a speaker's clips on one side. Every draw comes from a random stream
keyed by (seed, stream number, ...), so adding one kind of clip leaves the
others' draws alone.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import numpy as np

from audioclf.synthesis.settings import SynthesisError

# Dialects ("base") and voice variants ("+variant") from espeak-ng's data. Voices missing from
# the installed data are skipped, so an espeak-ng update that drops one still works (with
# different speakers, hence different file names and a regeneration).
BASE_VOICES = (
    "en",              # British (RP-ish default)
    "en-us",
    "en-us-nyc",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-gb-x-gbclan",  # Lancastrian
    "en-gb-x-gbcwmd",  # West Midlands
    "en-029",          # Caribbean
)
VOICE_VARIANTS = (
    "",  # the dialect's own voice
    "m1", "m2", "m3", "m4", "m5", "m6", "m7",
    "f1", "f2", "f3", "f4", "f5",
    # The Klatt formant synthesizer sounds clearly different from espeak's default one.
    "klatt", "klatt2", "klatt3", "klatt4",
    "croak",
)
RATE_WPM = (130, 220)
PITCH = (20, 80)        # espeak's 0-100 scale inside the voice's own pitch range
PITCH_RANGE = (20, 90)  # 0 is a monotone, 50 espeak's default
# Held-out speakers' rate and pitch: one of two bands each, beyond RATE_WPM and PITCH even
# after each clip's jitter (rate x 0.93-1.07, pitch +-3) on both sides.
HELD_OUT_RATE_WPM = ((90, 112), (255, 300))
HELD_OUT_PITCH = ((0, 13), (87, 100))


def available_voices(data_path: str) -> list[str]:
  """The voices of BASE_VOICES x VOICE_VARIANTS that espeak-ng's data in data_path has.

  Raises:
    SynthesisError: it has no English voice.
  """
  data = Path(data_path)
  # espeak matches language names case-insensitively (file lang/gmw/en-US is "en-us").
  langs = {p.name.lower() for p in (data / "lang").rglob("*") if p.is_file()}
  variants = {p.name for p in (data / "voices" / "!v").iterdir()}
  bases = [b for b in BASE_VOICES if b in langs]
  kept = [v for v in VOICE_VARIANTS if not v or v in variants]
  if not bases:
    raise SynthesisError(f"no English voice found in {data}; reinstall espeakng-loader")
  return [b + ("+" + v if v else "") for b in bases for v in kept]


def pool(voices: list[str], n: int, seed: int) -> list[dict]:
  """n distinct training speakers: {"voice", "rate", "pitch", "range", "id"} each."""
  rng = np.random.default_rng([seed, 0])
  return _distinct(n, set(), lambda: {
      "voice": voices[int(rng.integers(len(voices)))],
      "rate": int(rng.integers(RATE_WPM[0], RATE_WPM[1] + 1)),
      "pitch": int(rng.integers(PITCH[0], PITCH[1] + 1)),
      "range": int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1)),
  })


def held_out_pool(voices: list[str], n: int, seed: int, trained: list[dict]) -> list[dict]:
  """n speakers no training speaker resembles: unused voices, rate and pitch beyond their ranges.

  Drawn from a random stream of their own, so the training pool is the same with or without them.
  """
  rng = np.random.default_rng([seed, 4])
  used = {s["voice"] for s in trained}
  unused = [v for v in voices if v not in used] or voices

  def draw():
    rate = HELD_OUT_RATE_WPM[int(rng.integers(2))]
    pitch = HELD_OUT_PITCH[int(rng.integers(2))]
    return {
        "voice": unused[int(rng.integers(len(unused)))],
        "rate": int(rng.integers(rate[0], rate[1] + 1)),
        "pitch": int(rng.integers(pitch[0], pitch[1] + 1)),
        "range": int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1)),
    }

  return _distinct(n, {s["id"] for s in trained}, draw)


def _distinct(n: int, seen: set[str], draw) -> list[dict]:
  """n speakers from `draw`, each given its id; a repeat (or an id in `seen`) is drawn again."""
  speakers = []
  while len(speakers) < n:
    s = draw()
    key = json.dumps([s["voice"], s["rate"], s["pitch"], s["range"]])
    s["id"] = hashlib.sha1(key.encode()).hexdigest()[:8]
    if s["id"] not in seen:  # a repeat draw would merge two "speakers" into one
      seen.add(s["id"])
      speakers.append(s)
  return speakers


def table(speakers: list[dict]) -> dict[str, dict]:
  """Speaker id -> the voice, rate, pitch and range that make it, for the stamp."""
  return {s["id"]: {k: s[k] for k in ("voice", "rate", "pitch", "range")} for s in speakers}


def clip_rng(seed: int, name: str, i: int, stream: int) -> np.random.Generator:
  # Keyed by the word (or folder) itself, not its position, so adding a word leaves the others'
  # clips alone.
  return np.random.default_rng([seed, stream, zlib.crc32(name.encode()), i])


def job(speaker: dict, rng: np.random.Generator) -> list:
  """One take's espeak settings: the speaker's voice with this take's jitter, and its noise seed."""
  # Nobody says a word twice the same way; keep the jitter small so the speaker stays
  # recognizable.
  rate = int(round(speaker["rate"] * rng.uniform(0.93, 1.07)))
  pitch = int(np.clip(speaker["pitch"] + rng.integers(-3, 4), 0, 100))
  prange = int(np.clip(speaker["range"] + rng.integers(-5, 6), 0, 100))
  return [speaker["voice"], rate, pitch, prange, int(rng.integers(1, 2**31 - 1))]
