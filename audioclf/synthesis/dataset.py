"""generate(): a Speech Commands-layout dataset of spoken words, reused when it is already there.

    <out>/<word>/<speaker>_nohash_<n>.wav          per_word clips of each word (clips.py)
    <out>/_unknown_/<speaker>_nohash_<n>.wav       with unknown_words: per_word clips of others
    <out>/_background_noise_/<name>.wav            with background_noise (noise.py)
    <out>/_held_out/<word>/..., testing_list.txt   with held_out_speakers: unseen voices
    <out>/_generated.json                          the stamp, written last

The held-out speakers each use an espeak voice no training speaker uses (while
there are any), with rate and pitch beyond the training speakers' ranges
(speakers.held_out_pool), and say each word (and `_unknown_`'s words) as often
as a training speaker does; every one of their clips is listed as a test clip.
A folder scan of out skips `_held_out`, so the training data stays what it was;
evaluate on them with `--data_dir=<out>/_held_out --split=test`.

The output is a pure function of its Settings: the same settings give the
same bytes, and each part's clips are the same with or without the others.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from audioclf.synthesis import clips, folder, vocabulary
from audioclf.synthesis import speakers as speakers_lib
from audioclf.synthesis.settings import (DEFAULT_SPEAKERS, HELD_OUT_DIR, MISSING_ESPEAK,
                                         NOISE_SECONDS, STAMP_NAME, UNKNOWN_DIR, Settings,
                                         SynthesisError)

# The random streams of each part's draws: (jitter, rendering), or (order, jitter, rendering).
# The speaker pool's is 0, the noise's 3, the held-out pool's 4 (speakers.py, noise.py).
_WORDS, _HELD_OUT_WORDS = (1, 2), (5, 6)
_UNKNOWN, _HELD_OUT_UNKNOWN = (7, 8, 9), (10, 11, 12)


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A finished dataset: its folder, its files' absolute paths, and whether it was reused."""

  root: str
  files: tuple[str, ...]  # The word clips, word by word, in clip order.
  unknown_files: tuple[str, ...]
  noise_files: tuple[str, ...]
  held_out_files: tuple[str, ...]
  reused: bool

  @classmethod
  def read(cls, out_dir: str | os.PathLike, reused: bool = True) -> Dataset:
    """The dataset whose stamp is in out_dir."""
    root = Path(os.path.abspath(out_dir))
    stamp = json.loads((root / STAMP_NAME).read_text())
    paths = lambda key: tuple(str(root / p) for p in stamp.get(key, []))
    return cls(str(root), paths("files"), paths("unknown_files"), paths("noise_files"),
               paths("held_out_files"), reused)


def generate(out_dir: str | os.PathLike, words: Sequence[str] | str = vocabulary.DEFAULT_WORDS,
             per_word: int = 150, seed: int = 0, *, speakers: int = DEFAULT_SPEAKERS,
             force: bool = False, progress: bool = True, background_noise: bool = False,
             noise_seconds: float = NOISE_SECONDS, held_out_speakers: int = 0,
             unknown_words: Sequence[str] | str = ()) -> list[str]:
  """Writes (or reuses) a synthetic speech-commands dataset; see Settings for the arguments.

  Returns:
    The absolute paths of the word clips, word by word, in clip order (the other parts'
    files: `synthesize(...)`'s Dataset, or noise_paths, held_out_paths, unknown_paths).

  Raises:
    SynthesisError: espeakng-loader is missing, a word cannot be synthesized or does
      not fit in 1 s, or out_dir holds something the generator did not write.
  """
  settings = Settings(words, per_word, seed, speakers, background_noise, noise_seconds,
                      held_out_speakers, unknown_words)
  return list(synthesize(out_dir, settings, force=force, progress=progress).files)


def synthesize(out_dir: str | os.PathLike, settings: Settings, *, force: bool = False,
               progress: bool = True) -> Dataset:
  """Writes the dataset `settings` describe into out_dir, or finds it there already.

  Args:
    out_dir: Dataset root; created if missing. An existing non-empty folder is only
      replaced when it holds a `_generated.json` stamp of the generator's.
    settings: what to say, how often, by whom; the same settings give the same bytes.
    force: Regenerate even if out_dir already holds this exact dataset.
    progress: Show a tqdm progress bar on stderr.

  Raises:
    SynthesisError: as generate().
  """
  settings = settings.checked()
  # Absolute, so "." or "data/" still have a parent folder and a name to swap in under.
  out = Path(os.path.abspath(out_dir))
  if not force and _reusable(out, settings.record()):
    return Dataset.read(out)
  try:
    import espeakng_loader  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise SynthesisError(MISSING_ESPEAK) from None
  folder.check_replaceable(out)
  tmp = folder.partial(out)
  try:
    _write(tmp, settings, espeakng_loader.get_data_path(), progress)
    folder.swap_in(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return Dataset.read(out, reused=False)


def noise_paths(out_dir: str | os.PathLike) -> list[str]:
  """The background noise recordings a finished dataset in out_dir holds (none without them)."""
  return list(Dataset.read(out_dir).noise_files)


def held_out_paths(out_dir: str | os.PathLike) -> list[str]:
  """The held-out speakers' clips a finished dataset in out_dir holds (none without them)."""
  return list(Dataset.read(out_dir).held_out_files)


def unknown_paths(out_dir: str | os.PathLike) -> list[str]:
  """The `_unknown_` clips a finished dataset in out_dir holds (none without them)."""
  return list(Dataset.read(out_dir).unknown_files)


def _write(root: Path, settings: Settings, espeak_data: str, progress: bool) -> None:
  """Writes the dataset `settings` describe into root, its stamp last; espeak_data: its voices."""
  voices = speakers_lib.available_voices(espeak_data)
  pool = speakers_lib.pool(voices, min(settings.speakers, settings.per_word), settings.seed)
  held = speakers_lib.held_out_pool(voices, settings.held_out_speakers, settings.seed, pool)
  plan = _plan(settings, pool, held)
  workers = _cpu_count()
  with tqdm(total=sum(len(t) for t in plan.values()), desc="speech words", unit="clip",
            file=sys.stderr, disable=not progress, dynamic_ncols=True) as bar:
    version = clips.write(root, plan["files"] + plan["unknown_files"], bar, workers)
    if held:
      (root / HELD_OUT_DIR).mkdir()
      clips.write(root / HELD_OUT_DIR, plan["held_out_files"], bar, workers)
  under = {"held_out_files": f"{HELD_OUT_DIR}/"}  # The stamp's paths are relative to out.
  stamp = {key: [under.get(key, "") + t.rel for t in takes] for key, takes in plan.items()
           if takes}
  stamp.update(settings=settings.record(), espeak_ng=version,
               speakers=speakers_lib.table(pool),
               file_bytes=(root / plan["files"][0].rel).stat().st_size)
  if settings.unknown_words:  # Which word each _unknown_ clip says.
    stamp["unknown_said"] = {under.get(key, "") + t.rel: t.word for key, takes in plan.items()
                             for t in takes if t.rel.startswith(UNKNOWN_DIR)}
  if settings.background_noise:
    from audioclf.synthesis import noise  # pylint: disable=g-import-not-at-top
    stamp["noise_files"] = noise.write(root, settings.words, settings.seed, voices,
                                       settings.noise_seconds, workers)
    stamp["noise_bytes"] = (root / stamp["noise_files"][0]).stat().st_size
  if held:
    stamp["held_out_speakers"] = speakers_lib.table(held)
    folder.write_atomically(root / HELD_OUT_DIR / "testing_list.txt",
                            "".join(f"{t.rel}\n" for t in plan["held_out_files"]))
  folder.write_atomically(root / STAMP_NAME, json.dumps(stamp, indent=1, sort_keys=True) + "\n")


def _plan(settings: Settings, pool: list[dict], held: list[dict]) -> dict[str, list[clips.Take]]:
  """Every clip of the dataset: its word clips, `_unknown_`'s, and the held-out speakers'."""
  s = settings
  plan = {"files": clips.word_takes(s.words, s.per_word, s.seed, pool, _WORDS),
          "unknown_files": [], "held_out_files": []}
  if s.unknown_words:
    plan["unknown_files"] = clips.unknown_takes(s.unknown_words, s.per_word, s.seed, pool,
                                                _UNKNOWN)
  if held:
    # Each held-out speaker says each word as often as a training speaker does.
    n = -(-s.per_word // len(pool)) * len(held)
    plan["held_out_files"] = clips.word_takes(s.words, n, s.seed, held, _HELD_OUT_WORDS)
    if s.unknown_words:
      plan["held_out_files"] += clips.unknown_takes(s.unknown_words, n, s.seed, held,
                                                    _HELD_OUT_UNKNOWN)
  return plan


def _reusable(out: Path, record: dict) -> bool:
  """Whether out already holds the dataset `record` describes, complete."""
  try:
    stamp = json.loads((out / STAMP_NAME).read_text())
    if stamp["settings"] != record:
      return False
    if len(stamp["files"]) != len(record["words"]) * record["per_word"]:
      return False
    parts = [("files", "file_bytes"), ("unknown_files", "file_bytes"),
             ("held_out_files", "file_bytes"), ("noise_files", "noise_bytes")]
    wanted = {"files": True, "unknown_files": "unknown_words" in record,
              "held_out_files": "held_out_speakers" in record,
              "noise_files": "background_noise" in record}
    for key, size in parts:
      if wanted[key] and (not stamp.get(key) or any(
          (out / p).stat().st_size != stamp[size] for p in stamp[key])):
        return False
  except (OSError, ValueError, KeyError, TypeError):
    return False
  return True


def _cpu_count() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1
