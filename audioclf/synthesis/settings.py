"""What a dataset is a pure function of: its Settings, their checks, its layout's names."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from audioclf.synthesis import vocabulary

SAMPLE_RATE = 16000
CLIP_SAMPLES = SAMPLE_RATE
# A word has to leave room for its offset to vary, and espeak's trimmed output still
# carries a few ms of padding.
MAX_WORD_SECONDS = 0.95
DEFAULT_SPEAKERS = 50

STAMP_NAME = "_generated.json"
NOISE_DIR = "_background_noise_"  # Speech Commands' name; audioclf reads it from data_dir.
NOISE_SECONDS = 30.0
HELD_OUT_DIR = "_held_out"  # Starts with "_": a folder scan of out_dir takes it for no label.
UNKNOWN_DIR = "_unknown_"  # The label audioclf.data.manifest gives other words.
# Bump whenever the output for unchanged settings changes, so old stamps stop matching.
GENERATOR_VERSION = 1

MISSING_ESPEAK = "espeakng-loader is not installed; pip install 'audioclf[synthesize]'"


class SynthesisError(RuntimeError):
  """A problem the user can fix (missing package, bad word, unusable out_dir)."""


@dataclasses.dataclass(frozen=True)
class Settings:
  """Everything a dataset's bytes depend on; `checked()` gives the form generate() works from.

  Attributes:
    words: The words (class folders), a sequence or a comma-separated string.
    per_word: Clips per word. Clip i of every word is spoken by speaker i % speakers.
    seed: Non-negative seed; the same settings always give byte-identical files.
    speakers: Size of the speaker pool shared by all words.
    background_noise: Also write `_background_noise_/` (audioclf.synthesis.noise).
    noise_seconds: Length of each background noise recording.
    held_out_speakers: Also write this many unseen speakers' clips under `_held_out/`.
    unknown_words: Also write `_unknown_/`: per_word clips of other words, said by the same
      speakers. Either the words, or one number N: the first N of
      vocabulary.UNKNOWN_VOCABULARY that are not among `words`.
  """

  words: Sequence[str] | str = vocabulary.DEFAULT_WORDS
  per_word: int = 150
  seed: int = 0
  speakers: int = DEFAULT_SPEAKERS
  background_noise: bool = False
  noise_seconds: float = NOISE_SECONDS
  held_out_speakers: int = 0
  unknown_words: Sequence[str] | str = ()

  def checked(self) -> Settings:
    """These settings with the words as a tuple and the unknown words chosen.

    Raises:
      SynthesisError: no words, a word that cannot name a folder, a repeat, or a count,
        length or seed no dataset can have.
    """
    try:
      words = vocabulary.check_words(self.words, "--words")
      unknown = vocabulary.unknown_words(self.unknown_words, words)
    except ValueError as e:
      raise SynthesisError(str(e)) from None
    if self.per_word < 1 or self.speakers < 1:
      raise SynthesisError("--per_word and --speakers must be at least 1")
    if self.held_out_speakers < 0:
      raise SynthesisError("--held_out_speakers must be non-negative")
    if self.background_noise and not 1.0 <= self.noise_seconds <= 3600:
      raise SynthesisError("--noise_seconds must be between 1 and 3600")
    if self.seed < 0:
      raise SynthesisError("--seed must be non-negative")
    return dataclasses.replace(self, words=tuple(words), unknown_words=tuple(unknown))

  def record(self) -> dict[str, Any]:
    """What the stamp records of checked settings: a finished dataset is reused when it matches."""
    record = {
        "generator": GENERATOR_VERSION,
        "words": list(self.words),
        "per_word": int(self.per_word),
        "seed": int(self.seed),
        "speakers": int(self.speakers),
        "sample_rate": SAMPLE_RATE,
        "clip_samples": CLIP_SAMPLES,
    }
    # Each only when asked: a dataset without them keeps the stamp (and the reuse) it had.
    if self.background_noise:
      record["background_noise"] = {"seconds": float(self.noise_seconds)}
    if self.held_out_speakers:
      record["held_out_speakers"] = int(self.held_out_speakers)
    if self.unknown_words:
      record["unknown_words"] = list(self.unknown_words)
    return record
