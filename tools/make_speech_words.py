"""python tools/make_speech_words.py --out_dir data/speech_words --per_word 150 --seed 0

Synthesizes a small speech-command dataset in the Google Speech Commands layout,
so demos and tests can train a real keyword classifier without downloading anything:

    <out_dir>/<word>/<speaker>_nohash_<n>.wav     16 kHz, mono, PCM_16, exactly 1.0 s

Words are spoken by the espeak-ng library bundled in the `espeakng-loader` wheel (called
through ctypes; no system package, no espeak binary). A "speaker" is a fixed combination of
English voice/variant, speaking rate, pitch and pitch range; its 8-hex-char id is a hash of
those parameters and the same speakers say every word, so the usual Speech Commands
speaker-hash split keeps a speaker's clips on one side. Each clip further gets a slight
rate/pitch jitter, a random position inside the 1 s window, a random gain and white or pink
background noise at 15-40 dB SNR, so a classifier has to generalize rather than memorize.

With --background_noise it also writes the folder Speech Commands ships for noise mixing:

    <out_dir>/_background_noise_/<name>.wav   16 kHz, mono, PCM_16, --noise_seconds long

white, pink and brown noise, mains hum at 50 Hz and at 60 Hz (with harmonics and a slowly
wandering level), and babble: several of this tool's own voices saying words that are not
among the dataset's words, overlapping. A folder scan skips `_background_noise_` as a label;
audioclf mixes excerpts of these into training examples (--noise_prob, --noise_snr_db).

With --held_out_speakers=N it also writes voices the training data never has, to measure how a
model does on unseen voices:

    <out_dir>/_held_out/<word>/<speaker>_nohash_<n>.wav   as many clips per speaker as above
    <out_dir>/_held_out/testing_list.txt                   every one of them: all are test clips

N more speakers, each of an espeak voice no training speaker uses (while there are any) and
with its speaking rate and pitch drawn beyond the training speakers' ranges (slower or faster,
lower or higher: HELD_OUT_RATE_WPM, HELD_OUT_PITCH). A folder scan of out_dir skips `_held_out`
(as any folder starting with "_"), so the training data stays what it was; evaluate on them with
`python -m audioclf evaluate --data_dir=<out_dir>/_held_out --split=test`.

The output is a pure function of (words, per_word, seed, speakers, background noise and its
length, held-out speakers): the same settings give the same bytes, and the word clips are the
same with or without the held-out ones. A finished dataset is stamped with `_generated.json`
(written last); a rerun with the same settings reuses it and returns at once, --force
regenerates.

Import `generate()` from other tools and tests (tools/ is not a package; load this file with
importlib or put tools/ on sys.path).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import hashlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

DEFAULT_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
DEFAULT_SPEAKERS = 50

SAMPLE_RATE = 16000
CLIP_SAMPLES = SAMPLE_RATE
# A word has to leave room for its offset to vary, and espeak's trimmed output still
# carries a few ms of padding.
MAX_WORD_SECONDS = 0.95
SNR_DB = (15.0, 40.0)
PEAK_DBFS = (-18.0, -1.0)

STAMP_NAME = "_generated.json"
NOISE_DIR = "_background_noise_"  # Speech Commands' name; audioclf reads it from data_dir.
NOISE_SECONDS = 30.0
# Each recording's RMS, in dBFS: a steady background well under the words' peaks.
NOISE_RMS_DBFS = -26.0
# Filler words for babble; the dataset's own words are left out, so babble never says a class.
BABBLE_WORDS = ("the", "and", "maybe", "later", "water", "paper", "number", "coffee", "window",
                "morning", "yellow", "because", "people", "little", "table", "sunday")
BABBLE_VOICES = 6  # Talkers overlapping at any time.
HELD_OUT_DIR = "_held_out"  # Starts with "_": a folder scan of out_dir takes it for no label.
# Bump whenever the output for unchanged settings changes, so old stamps stop matching.
GENERATOR_VERSION = 1

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
# Faster than this is no longer intelligible speech; a word that still does not fit is refused.
MAX_RATE_WPM = 700
PITCH = (20, 80)        # espeak's 0-100 scale inside the voice's own pitch range
PITCH_RANGE = (20, 90)  # 0 is a monotone, 50 espeak's default
# Held-out speakers' rate and pitch: one of two bands each, beyond RATE_WPM and PITCH even
# after each clip's jitter (rate x 0.93-1.07, pitch +-3) on both sides.
HELD_OUT_RATE_WPM = ((90, 112), (255, 300))
HELD_OUT_PITCH = ((0, 13), (87, 100))

# Values from espeak-ng's speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000
_CHARS_UTF8 = 1
_POS_CHARACTER = 1
_PARAM_RATE, _PARAM_PITCH, _PARAM_RANGE = 1, 3, 4
_WORKER_FLAG = "--_synth_worker"
_THIS_FILE = os.path.abspath(__file__)  # before anyone chdirs
_WORKER_FAILED = 3

_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")
_DEMO_HINT = "espeakng-loader is not installed; pip install 'audioclf[demo]'"


class SpeechWordsError(RuntimeError):
  """A problem the user can fix (missing package, bad word, unusable out_dir)."""


def generate(
    out_dir: str | os.PathLike,
    words: Sequence[str] | str = DEFAULT_WORDS,
    per_word: int = 150,
    seed: int = 0,
    *,
    speakers: int = DEFAULT_SPEAKERS,
    force: bool = False,
    progress: bool = True,
    background_noise: bool = False,
    noise_seconds: float = NOISE_SECONDS,
    held_out_speakers: int = 0,
) -> list[str]:
  """Writes (or reuses) a synthetic speech-commands dataset.

  Args:
    out_dir: Dataset root; created if missing. An existing non-empty directory is only
      replaced when it holds a `_generated.json` stamp from this tool.
    words: The words (class folders), a sequence or a comma-separated string.
    per_word: Clips per word. Clip i of every word is spoken by speaker i % speakers.
    seed: Non-negative seed; the same settings always give byte-identical files.
    speakers: Size of the speaker pool shared by all words.
    force: Regenerate even if out_dir already holds this exact dataset.
    progress: Show a tqdm progress bar on stderr.
    background_noise: Also write `_background_noise_/` (see the module docstring).
    noise_seconds: Length of each background noise recording.
    held_out_speakers: Also write this many unseen speakers' clips under `_held_out/`
      (see the module docstring).

  Returns:
    The absolute paths of the word clips, word by word, in clip order (the background
    noise recordings and held-out clips are not among them: see `noise_paths` and
    `held_out_paths`).

  Raises:
    SpeechWordsError: espeakng-loader is missing, a word cannot be synthesized or does
      not fit in 1 s, or out_dir holds something this tool did not write.
  """
  paths, _ = _generate(out_dir, words, per_word, seed, speakers=speakers, force=force,
                       progress=progress, background_noise=background_noise,
                       noise_seconds=noise_seconds, held_out_speakers=held_out_speakers)
  return paths


def noise_paths(out_dir: str | os.PathLike) -> list[str]:
  """The background noise recordings a finished dataset in out_dir holds (none without them)."""
  out = Path(os.path.abspath(out_dir))
  stamp = json.loads((out / STAMP_NAME).read_text())
  return [str(out / p) for p in stamp.get("noise_files", [])]


def held_out_paths(out_dir: str | os.PathLike) -> list[str]:
  """The held-out speakers' clips a finished dataset in out_dir holds (none without them)."""
  out = Path(os.path.abspath(out_dir))
  stamp = json.loads((out / STAMP_NAME).read_text())
  return [str(out / p) for p in stamp.get("held_out_files", [])]


def _generate(out_dir, words, per_word, seed, *, speakers, force, progress,
              background_noise=False, noise_seconds=NOISE_SECONDS, held_out_speakers=0):
  words = _check_words(words)
  _check_numbers(per_word, seed, speakers, background_noise, noise_seconds, held_out_speakers)
  # Absolute, so "." or "data/" still have a parent folder and a name to swap in under.
  out = Path(os.path.abspath(out_dir))
  settings = _settings(words, per_word, seed, speakers, background_noise, noise_seconds,
                       held_out_speakers)
  if not force:
    reused = _reusable(out, settings)
    if reused is not None:
      return reused, True

  if importlib.util.find_spec("espeakng_loader") is None:
    raise SpeechWordsError(_DEMO_HINT)
  _check_replaceable(out)
  voices = _available_voices()
  pool = _speaker_pool(voices, min(speakers, per_word), seed)
  tmp = _partial_dir(out)
  try:
    rel_paths = _write_dataset(tmp, settings, voices, pool, progress)
    _swap_in(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return [str(out / p) for p in rel_paths], False


def _check_numbers(per_word, seed, speakers, background_noise, noise_seconds,
                   held_out_speakers) -> None:
  """Raises SpeechWordsError for a count, length or seed no dataset can have."""
  if per_word < 1 or speakers < 1:
    raise SpeechWordsError("--per_word and --speakers must be at least 1")
  if held_out_speakers < 0:
    raise SpeechWordsError("--held_out_speakers must be non-negative")
  if background_noise and not 1.0 <= noise_seconds <= 3600:
    raise SpeechWordsError("--noise_seconds must be between 1 and 3600")
  if seed < 0:
    raise SpeechWordsError("--seed must be non-negative")


def _settings(words, per_word, seed, speakers, background_noise, noise_seconds,
              held_out_speakers) -> dict:
  """What the output is a pure function of, as the stamp records it."""
  settings = {
      "generator": GENERATOR_VERSION,
      "words": list(words),
      "per_word": int(per_word),
      "seed": int(seed),
      "speakers": int(speakers),
      "sample_rate": SAMPLE_RATE,
      "clip_samples": CLIP_SAMPLES,
  }
  if background_noise:
    # Only when asked: a dataset without noise keeps the stamp (and the reuse) it had.
    settings["background_noise"] = {"seconds": float(noise_seconds)}
  if held_out_speakers:
    settings["held_out_speakers"] = int(held_out_speakers)  # Likewise only when asked.
  return settings


def _partial_dir(out: Path) -> Path:
  """A new, empty folder beside out to build the dataset in, and swap in for out at the end.

  So an interrupted run never leaves a half-written dataset behind, and files of an older
  dataset with other words never mix in. Not mkdtemp: its 0700 mode would end up on out_dir;
  mkdir honours the umask.
  """
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = out.parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
  tmp.mkdir()
  return tmp


def _write_dataset(root: Path, settings: dict, voices: list[str], pool: list[dict],
                   progress: bool) -> list[str]:
  """Writes the dataset `settings` describe into root, its stamp last; returns the clips' paths.

  Returns:
    The word clips' paths relative to root, word by word, in clip order.
  """
  words, per_word, seed = settings["words"], settings["per_word"], settings["seed"]
  rel_paths, espeak_version = _write_clips(root, words, per_word, seed, pool, progress)
  noise = settings.get("background_noise")
  noise_files = _write_noise(root, words, seed, voices, noise["seconds"]) if noise else []
  held_out = _held_out_pool(voices, settings.get("held_out_speakers", 0), seed, pool)
  stamp = {
      "settings": settings,
      "files": rel_paths,
      "noise_files": noise_files,
      "noise_bytes": (root / noise_files[0]).stat().st_size if noise_files else None,
      "file_bytes": (root / rel_paths[0]).stat().st_size,
      "espeak_ng": espeak_version,
      "speakers": _speaker_table(pool),
  }
  if held_out:
    stamp["held_out_files"] = _write_held_out(root, words, per_word, seed, pool, held_out,
                                              progress)
    stamp["held_out_speakers"] = _speaker_table(held_out)
  _write_atomically(root / STAMP_NAME, json.dumps(stamp, indent=1, sort_keys=True) + "\n")
  return rel_paths


def _speaker_table(pool: list[dict]) -> dict[str, dict]:
  """Speaker id -> the voice, rate, pitch and range that make it, for the stamp."""
  return {s["id"]: {k: s[k] for k in ("voice", "rate", "pitch", "range")} for s in pool}


def _check_words(words) -> list[str]:
  if isinstance(words, str):
    words = words.split(",")
  words = [w.strip() for w in words if w.strip()]
  if not words:
    raise SpeechWordsError("no words given")
  for w in words:
    if not _WORD_RE.fullmatch(w):
      raise SpeechWordsError(
          f"cannot synthesize {w!r}: a word must be letters/digits (plus ' and -), "
          "since it also names its class folder")
  if len(set(words)) != len(words):
    raise SpeechWordsError(f"duplicate words in {','.join(words)}")
  return words


def _reusable(out: Path, settings: dict) -> list[str] | None:
  """Returns the dataset's paths if out already holds it complete, else None."""
  try:
    stamp = json.loads((out / STAMP_NAME).read_text())
    if stamp["settings"] != settings:
      return None
    paths = [out / p for p in stamp["files"]]
    if len(paths) != len(settings["words"]) * settings["per_word"]:
      return None
    if any(p.stat().st_size != stamp["file_bytes"] for p in paths):
      return None
    if "background_noise" in settings and (not stamp.get("noise_files") or any(
        (out / p).stat().st_size != stamp["noise_bytes"] for p in stamp["noise_files"])):
      return None
    if "held_out_speakers" in settings and (not stamp.get("held_out_files") or any(
        (out / p).stat().st_size != stamp["file_bytes"] for p in stamp["held_out_files"])):
      return None
  except (OSError, ValueError, KeyError, TypeError):
    return None
  return [str(p) for p in paths]


def _check_replaceable(out: Path) -> None:
  if out.exists() and not out.is_dir():
    raise SpeechWordsError(f"{out} exists and is not a directory")
  # The old folder is swapped out and deleted, which would pull the ground from under a shell
  # or process sitting inside it.
  cwd = Path(os.getcwd())
  if cwd == out or out in cwd.parents:
    raise SpeechWordsError(f"--out_dir {out} holds the current directory; use a subfolder")
  # Replacing the folder deletes it, so only ever delete what this tool wrote.
  if out.is_dir() and any(out.iterdir()) and not (out / STAMP_NAME).exists():
    raise SpeechWordsError(
        f"{out} is not empty and was not written by this tool (no {STAMP_NAME}); "
        "remove it or choose another --out_dir")


def _swap_in(tmp: Path, out: Path) -> None:
  if out.exists():
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
  else:
    os.replace(tmp, out)


def _write_atomically(path: Path, text: str) -> None:
  part = path.with_name(path.name + ".part")
  part.write_text(text)
  os.replace(part, path)


def _available_voices() -> list[str]:
  import espeakng_loader

  data = Path(espeakng_loader.get_data_path())
  # espeak matches language names case-insensitively (file lang/gmw/en-US is "en-us").
  langs = {p.name.lower() for p in (data / "lang").rglob("*") if p.is_file()}
  variants = {p.name for p in (data / "voices" / "!v").iterdir()}
  bases = [b for b in BASE_VOICES if b in langs]
  kept = [v for v in VOICE_VARIANTS if not v or v in variants]
  if not bases:
    raise SpeechWordsError(f"no English voice found in {data}; reinstall espeakng-loader")
  return [b + ("+" + v if v else "") for b in bases for v in kept]


def _speaker_pool(voices: list[str], n: int, seed: int) -> list[dict]:
  rng = np.random.default_rng([seed, 0])
  pool, seen = [], set()
  while len(pool) < n:
    s = {
        "voice": voices[int(rng.integers(len(voices)))],
        "rate": int(rng.integers(RATE_WPM[0], RATE_WPM[1] + 1)),
        "pitch": int(rng.integers(PITCH[0], PITCH[1] + 1)),
        "range": int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1)),
    }
    key = json.dumps([s["voice"], s["rate"], s["pitch"], s["range"]])
    s["id"] = hashlib.sha1(key.encode()).hexdigest()[:8]
    if s["id"] not in seen:  # a repeat draw would merge two "speakers" into one
      seen.add(s["id"])
      pool.append(s)
  return pool


def _held_out_pool(voices: list[str], n: int, seed: int, pool: list[dict]) -> list[dict]:
  """n speakers no training speaker resembles: unused voices, rate and pitch beyond their ranges.

  Drawn from a random stream of their own, so the training pool is the same with or without them.
  """
  rng = np.random.default_rng([seed, 4])
  used = {s["voice"] for s in pool}
  unused = [v for v in voices if v not in used] or voices
  held, seen = [], {s["id"] for s in pool}
  while len(held) < n:
    rate = HELD_OUT_RATE_WPM[int(rng.integers(2))]
    pitch = HELD_OUT_PITCH[int(rng.integers(2))]
    s = {
        "voice": unused[int(rng.integers(len(unused)))],
        "rate": int(rng.integers(rate[0], rate[1] + 1)),
        "pitch": int(rng.integers(pitch[0], pitch[1] + 1)),
        "range": int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1)),
    }
    key = json.dumps([s["voice"], s["rate"], s["pitch"], s["range"]])
    s["id"] = hashlib.sha1(key.encode()).hexdigest()[:8]
    if s["id"] not in seen:
      seen.add(s["id"])
      held.append(s)
  return held


def _write_held_out(root: Path, words, per_word: int, seed: int, pool: list[dict],
                    held: list[dict], progress: bool) -> list[str]:
  """Writes the held-out speakers' clips under root/HELD_OUT_DIR, and its testing_list.txt.

  Each held-out speaker says each word as often as a training speaker does. Their jitter and
  rendering draw from random streams of their own (the word clips' are 1 and 2, the noise's 3,
  the held-out pool's 4), so the word clips are the same bytes with or without them.

  Returns:
    Their paths relative to root.
  """
  folder = root / HELD_OUT_DIR
  folder.mkdir()
  clips = -(-per_word // len(pool)) * len(held)
  rel_paths, _ = _write_clips(folder, words, clips, seed, held, progress, streams=(5, 6))
  _write_atomically(folder / "testing_list.txt", "".join(f"{p}\n" for p in rel_paths))
  return [f"{HELD_OUT_DIR}/{p}" for p in rel_paths]


def _clip_rng(seed: int, word: str, i: int, stream: int) -> np.random.Generator:
  # Keyed by the word itself, not its position, so adding a word leaves the others' clips alone.
  return np.random.default_rng([seed, stream, zlib.crc32(word.encode()), i])


def _jobs_for_word(word: str, per_word: int, seed: int, pool: list[dict],
                   stream: int = 1) -> list[list]:
  jobs = []
  for i in range(per_word):
    s = pool[i % len(pool)]
    rng = _clip_rng(seed, word, i, stream)
    # Nobody says a word twice the same way; keep the jitter small so the speaker stays
    # recognizable.
    rate = int(round(s["rate"] * rng.uniform(0.93, 1.07)))
    pitch = int(np.clip(s["pitch"] + rng.integers(-3, 4), 0, 100))
    prange = int(np.clip(s["range"] + rng.integers(-5, 6), 0, 100))
    jobs.append([s["voice"], rate, pitch, prange, int(rng.integers(1, 2**31 - 1))])
  return jobs


def _write_clips(root: Path, words, per_word, seed, pool, progress, streams=(1, 2)):
  """Writes root/<word>/<speaker>_nohash_<n>.wav; `streams` key the jitter and render draws."""
  import soundfile as sf
  import soxr
  from tqdm import tqdm

  n_workers = max(1, min(len(words), _cpu_count()))
  rel_paths, version = [], None
  bar = tqdm(total=len(words) * per_word, desc="speech words", unit="clip",
             file=sys.stderr, disable=not progress, dynamic_ncols=True)
  with bar, concurrent.futures.ThreadPoolExecutor(n_workers) as ex:
    futures = [ex.submit(_synthesize_word, w, _jobs_for_word(w, per_word, seed, pool, streams[0]))
               for w in words]
    try:
      for word, fut in zip(words, futures):
        header, raws = fut.result()
        version = header["espeak"]
        (root / word).mkdir()
        for i, raw in enumerate(raws):
          clip = _render_clip(raw, header["sample_rate"], _clip_rng(seed, word, i, streams[1]),
                              soxr)
          rel = f"{word}/{pool[i % len(pool)]['id']}_nohash_{i // len(pool)}.wav"
          sf.write(root / rel, clip, SAMPLE_RATE, subtype="PCM_16", format="WAV")
          rel_paths.append(rel)
          bar.update()
    finally:
      for f in futures:
        f.cancel()
  return rel_paths, version


def _cpu_count() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def _render_clip(raw: np.ndarray, raw_rate: int, rng: np.random.Generator, soxr) -> np.ndarray:
  speech = soxr.resample(raw.astype(np.float64) / 32768.0, raw_rate, SAMPLE_RATE)
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

  clip = noise
  clip[offset:offset + len(speech)] += speech
  return np.clip(np.round(clip * 32767.0), -32768, 32767).astype(np.int16)


def _write_noise(root: Path, words, seed: int, voices: list[str], seconds: float) -> list[str]:
  """Writes the background noise recordings under root/NOISE_DIR; returns their relative paths.

  Each recording has its own random stream keyed by its name, so adding one
  leaves the others' bytes alone.
  """
  import soundfile as sf

  n = int(round(seconds * SAMPLE_RATE))
  makers = {
      "white_noise": lambda rng: _coloured_noise(rng, n, 0.0),
      "pink_noise": lambda rng: _coloured_noise(rng, n, 1.0),
      "brown_noise": lambda rng: _coloured_noise(rng, n, 2.0),
      "hum_50hz": lambda rng: _hum(rng, n, 50.0),
      "hum_60hz": lambda rng: _hum(rng, n, 60.0),
      "babble": lambda rng: _babble(rng, n, words, voices),
  }
  (root / NOISE_DIR).mkdir()
  rel_paths = []
  for name, make in makers.items():
    x = make(np.random.default_rng([seed, 3, zlib.crc32(name.encode())]))
    x *= 10 ** (NOISE_RMS_DBFS / 20) / np.sqrt(np.mean(x ** 2))
    rel = f"{NOISE_DIR}/{name}.wav"
    sf.write(root / rel, np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16),
             SAMPLE_RATE, subtype="PCM_16", format="WAV")
    rel_paths.append(rel)
  (root / NOISE_DIR / "README.md").write_text(
      "Background noise written by tools/make_speech_words.py --background_noise: "
      f"{', '.join(makers)}; {seconds:g} s each at {SAMPLE_RATE} Hz, {NOISE_RMS_DBFS:g} dBFS RMS.\n")
  return rel_paths


def _coloured_noise(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
  """Gaussian noise whose power falls as 1/f**exponent (0 white, 1 pink, 2 brown), from 20 Hz."""
  spec = np.fft.rfft(rng.standard_normal(n))
  freqs = np.fft.rfftfreq(n, 1.0 / SAMPLE_RATE)
  # Below 20 Hz brown noise would be mostly a wandering DC offset no microphone passes.
  spec[freqs < 20.0] = 0.0
  spec[freqs >= 20.0] /= freqs[freqs >= 20.0] ** (exponent / 2)
  return np.fft.irfft(spec, n)


def _hum(rng: np.random.Generator, n: int, mains_hz: float) -> np.ndarray:
  """Mains hum: the fundamental and its harmonics, a slowly wandering level, a faint noise floor."""
  t = np.arange(n) / SAMPLE_RATE
  x = np.zeros(n)
  # The second harmonic is the loudest in transformer hum (magnetostriction), then they fade.
  for k, amp in enumerate((0.6, 1.0, 0.5, 0.35, 0.2, 0.12, 0.08, 0.05), start=1):
    x += amp * rng.uniform(0.7, 1.3) * np.sin(2 * np.pi * k * mains_hz * t + rng.uniform(0, 2 * np.pi))
  x *= 1.0 + 0.25 * np.sin(2 * np.pi * rng.uniform(0.05, 0.2) * t + rng.uniform(0, 2 * np.pi))
  floor = _coloured_noise(rng, n, 1.0)
  return x / np.sqrt(np.mean(x ** 2)) + 0.03 * floor / np.sqrt(np.mean(floor ** 2))


def _babble(rng: np.random.Generator, n: int, words, voices: list[str]) -> np.ndarray:
  """Talkers of this tool's own voices saying filler words, overlapping, none of them a class."""
  import soxr

  taken = {w.lower() for w in words}
  fillers = [w for w in BABBLE_WORDS if w not in taken]
  talkers = [[voices[int(i)], int(rng.integers(RATE_WPM[0], RATE_WPM[1] + 1)),
              int(rng.integers(PITCH[0], PITCH[1] + 1)),
              int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1)),
              int(rng.integers(1, 2**31 - 1))]
             for i in rng.choice(len(voices), min(BABBLE_VOICES, len(voices)), replace=False)]
  # One espeak process per word, every talker's take of it (as the clips are made).
  with concurrent.futures.ThreadPoolExecutor(max(1, _cpu_count())) as ex:
    said = list(ex.map(lambda w: _synthesize_word(w, talkers), fillers))
  out = np.zeros(n)
  for t in range(len(talkers)):
    takes = [soxr.resample(raws[t].astype(np.float64) / 32768.0, header["sample_rate"],
                           SAMPLE_RATE) for header, raws in said]
    gain = 10 ** (rng.uniform(-6.0, 0.0) / 20)
    at = int(rng.integers(0, SAMPLE_RATE))
    while at < n:
      take = takes[int(rng.integers(len(takes)))]
      end = min(n, at + len(take))
      out[at:end] += gain * take[:end - at] / np.max(np.abs(take))
      at = end + int(rng.uniform(0.05, 0.4) * SAMPLE_RATE)  # A breath between words.
  return out


def _synthesize_word(word: str, jobs: list[list]) -> tuple[dict, list[np.ndarray]]:
  """Runs the espeak worker for one word in a fresh process.

  espeak-ng keeps synthesis state between utterances (the same text comes out a few samples
  different each call, depending on what was spoken before, and re-initializing does not
  reset it), so a fresh process per word is what makes a word's clips depend only on the
  settings, not on what else this process synthesized earlier.
  """
  proc = subprocess.run(
      [sys.executable, _THIS_FILE, _WORKER_FLAG],
      input=json.dumps({"word": word, "jobs": jobs}).encode(),
      capture_output=True,
      check=False,
  )
  if proc.returncode != 0:
    msg = proc.stderr.decode(errors="replace").strip()
    if proc.returncode == _WORKER_FAILED and msg:
      raise SpeechWordsError(msg.splitlines()[-1])
    raise SpeechWordsError(
        f"espeak worker for {word!r} died (exit {proc.returncode}): {msg[-2000:]}")
  head, _, body = proc.stdout.partition(b"\n")
  header = json.loads(head)
  audio = np.frombuffer(body, dtype=np.int16)
  bounds = np.cumsum([0] + header["lengths"])
  return header, [audio[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _worker_main() -> int:
  """Synthesizes the jobs read from stdin; writes a JSON header line plus raw int16 audio."""
  req = json.load(sys.stdin)
  word = req["word"]
  try:
    import espeakng_loader
  except ImportError:
    return _worker_fail(_DEMO_HINT)

  lib, set_seed = _espeak_library(espeakng_loader.get_library_path())
  # DONT_EXIT: without it a bad data path makes espeak call exit() inside this process.
  sample_rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0,
                                      espeakng_loader.get_data_path().encode(),
                                      _INITIALIZE_DONT_EXIT)
  if sample_rate <= 0:
    return _worker_fail(f"espeak-ng failed to initialize (data in "
                        f"{espeakng_loader.get_data_path()}); reinstall espeakng-loader")
  speaker = _WordSpeaker(lib, set_seed, sample_rate, word)
  lengths, out = [], []
  try:
    for voice, wpm, pitch, prange, noise_seed in req["jobs"]:
      audio = speaker.say_in_a_clip(voice, wpm, pitch, prange, noise_seed)
      lengths.append(len(audio))
      out.append(audio.tobytes())
  except ValueError as e:
    return _worker_fail(f"cannot synthesize {word!r} ({voice}): {e}")
  header = {"sample_rate": sample_rate, "espeak": lib.espeak_Info(None).decode(),
            "lengths": lengths}
  sys.stdout.buffer.write(json.dumps(header).encode() + b"\n")
  sys.stdout.buffer.write(b"".join(out))
  sys.stdout.buffer.flush()
  return 0


def _espeak_library(path: str):
  """espeak-ng's shared library at path, its functions typed; and espeak_ng_SetRandSeed, or None."""
  lib = ctypes.CDLL(path)
  lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
  lib.espeak_Initialize.restype = ctypes.c_int
  lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
  lib.espeak_SetVoiceByName.restype = ctypes.c_int
  lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
  lib.espeak_SetParameter.restype = ctypes.c_int
  lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                               ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
  lib.espeak_Synth.restype = ctypes.c_int
  lib.espeak_Synchronize.restype = ctypes.c_int
  lib.espeak_Info.argtypes = [ctypes.c_void_p]
  lib.espeak_Info.restype = ctypes.c_char_p
  # Without a fixed seed some voices (f3, whisper ...) come out different in every process:
  # espeak seeds its own noise generator. Older espeak-ng builds lack this function.
  set_seed = getattr(lib, "espeak_ng_SetRandSeed", None)
  if set_seed is not None:
    set_seed.argtypes = [ctypes.c_long]
    set_seed.restype = None
  return lib, set_seed


class _WordSpeaker:
  """Says one word with an initialized espeak-ng, in any voice, rate and pitch."""

  def __init__(self, lib, set_seed, sample_rate: int, word: str):
    self._lib, self._set_seed, self._sample_rate = lib, set_seed, sample_rate
    self._text = word.encode("utf-8") + b"\0"
    self._chunks: list[bytes] = []
    # Kept on self for the whole run: if ctypes' thunk were collected, espeak would call
    # freed memory.
    self._callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                      ctypes.c_void_p)(self._collect)
    lib.espeak_SetSynthCallback(self._callback)

  def _collect(self, wav, n, events):
    if wav and n > 0:
      self._chunks.append(ctypes.string_at(wav, n * 2))
    return 0  # 0 = keep going

  def say_in_a_clip(self, voice, wpm, pitch, prange, noise_seed) -> np.ndarray:
    """The word, faster than wpm where it would not fit in MAX_WORD_SECONDS; ValueError if never."""
    limit = int(MAX_WORD_SECONDS * self._sample_rate)
    audio = self.say(voice, wpm, pitch, prange, noise_seed)
    # Too long for the window: speak faster rather than cut the word off (espeak-ng
    # goes past its classic 450 wpm limit through its bundled sonic library).
    while len(audio) > limit and wpm < MAX_RATE_WPM:
      wpm = min(MAX_RATE_WPM, int(np.ceil(wpm * len(audio) / limit * 1.05)))
      audio = self.say(voice, wpm, pitch, prange, noise_seed)
    if len(audio) > limit:
      raise ValueError(f"it lasts {len(audio) / self._sample_rate:.2f} s even at {wpm} words/min, "
                       f"more than the {MAX_WORD_SECONDS} s a 1 s clip allows")
    return audio

  def say(self, voice, wpm, pitch, prange, noise_seed) -> np.ndarray:
    """The word as int16 samples, trimmed of espeak's silence; ValueError if it fails."""
    lib = self._lib
    if lib.espeak_SetVoiceByName(voice.encode()) != 0:
      raise ValueError(f"espeak-ng has no voice {voice!r}")
    # These stick across utterances and voice changes, so every job sets all three.
    lib.espeak_SetParameter(_PARAM_RATE, wpm, 0)
    lib.espeak_SetParameter(_PARAM_PITCH, pitch, 0)
    lib.espeak_SetParameter(_PARAM_RANGE, prange, 0)
    if self._set_seed is not None:
      self._set_seed(noise_seed)
    self._chunks.clear()
    err = lib.espeak_Synth(self._text, len(self._text), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None,
                           None)
    lib.espeak_Synchronize()
    if err != 0:
      raise ValueError(f"espeak_Synth returned error {err}")
    audio = np.frombuffer(b"".join(self._chunks), dtype=np.int16)
    peak = int(np.max(np.abs(audio.astype(np.int32)))) if audio.size else 0
    if peak < 256:
      raise ValueError("espeak-ng produced no sound for it")
    # espeak pads with silence; trim it so the word's offset in the window is ours to pick.
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > peak * 0.005)
    pad = self._sample_rate // 100  # 10 ms, so soft onsets and endings survive the trim
    return audio[max(loud[0] - pad, 0):loud[-1] + pad + 1]


def _worker_fail(msg: str) -> int:
  print(msg, file=sys.stderr)
  return _WORKER_FAILED


def main(argv: Sequence[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv == [_WORKER_FLAG]:
    return _worker_main()
  args = _parser().parse_args(argv)
  start = time.perf_counter()
  try:
    paths, reused = _generate(args.out_dir, args.words, args.per_word, args.seed,
                              speakers=args.speakers, force=args.force,
                              progress=not args.no_progress,
                              background_noise=args.background_noise,
                              noise_seconds=args.noise_seconds,
                              held_out_speakers=args.held_out_speakers)
  except SpeechWordsError as e:
    print(f"make_speech_words: error: {e}", file=sys.stderr)
    return 1
  _print_summary(args, paths, reused, time.perf_counter() - start)
  return 0


def _parser() -> argparse.ArgumentParser:
  class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass

  p = argparse.ArgumentParser(description="\n\n".join(__doc__.split("\n\n")[1:3]),
                              formatter_class=Formatter)
  p.add_argument("--out_dir", default="data/speech_words", help="dataset root")
  p.add_argument("--words", default=",".join(DEFAULT_WORDS), help="comma-separated words")
  p.add_argument("--per_word", type=int, default=150, help="clips per word")
  p.add_argument("--seed", type=int, default=0, help="same seed, same bytes")
  p.add_argument("--speakers", type=int, default=DEFAULT_SPEAKERS,
                 help="speaker pool shared by all words (clip i is speaker i %% speakers)")
  p.add_argument("--background_noise", action="store_true",
                 help=f"also write {NOISE_DIR}/ (noise colours, hum, babble)")
  p.add_argument("--noise_seconds", type=float, default=NOISE_SECONDS,
                 help="length of each background noise recording")
  p.add_argument("--held_out_speakers", type=int, default=0,
                 help=f"also write this many unseen speakers' clips to {HELD_OUT_DIR}/ (voices "
                      "beyond the training speakers' rate and pitch), all listed as test clips")
  p.add_argument("--force", action="store_true", help="regenerate even if already there")
  p.add_argument("--no_progress", action="store_true", help="no progress bar")
  return p


def _print_summary(args: argparse.Namespace, paths: list[str], reused: bool, took: float) -> None:
  """What main made (or found already made) in args.out_dir, on stdout."""
  n_words = len(_check_words(args.words))
  if args.background_noise:
    n_noise = len(noise_paths(args.out_dir))
    print(f"with {n_noise} background noise recordings of {args.noise_seconds:g} s in "
          f"{args.out_dir}/{NOISE_DIR}")
  if args.held_out_speakers:
    print(f"with {len(held_out_paths(args.out_dir))} clips of {args.held_out_speakers} held-out "
          f"speakers in {args.out_dir}/{HELD_OUT_DIR} (all in its testing_list.txt)")
  if reused:
    print(f"reusing {args.out_dir}: {len(paths)} clips ({n_words} words x {args.per_word}) "
          f"already generated with these settings (--force regenerates)")
  else:
    print(f"wrote {len(paths)} clips ({n_words} words x {args.per_word}) to {args.out_dir} "
          f"in {took:.1f} s")


if __name__ == "__main__":
  sys.exit(main())
