"""Which words are said: the default keywords, those `_unknown_` draws from, babble's fillers."""

from __future__ import annotations

import re
from typing import Sequence

DEFAULT_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
# Speech Commands' 35 words first (its other words are what its keyword spotters learn to
# reject), then everyday words of one to three syllables.
UNKNOWN_VOCABULARY = (
    "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    "bed", "bird", "cat", "dog", "happy", "house", "marvin", "sheila", "tree", "wow",
    "backward", "forward", "follow", "learn", "visual",
    "apple", "banana", "orange", "music", "river", "garden", "kitchen", "pencil", "rabbit",
    "turtle", "monkey", "basket", "candle", "doctor", "letter", "silver", "summer", "winter",
    "tomorrow", "hello", "open", "close", "light", "phone", "green", "blue", "red", "hat",
    "car", "book", "chair", "door", "fish", "hand", "milk", "rain", "snow", "sun", "moon",
)
# Filler words for babble; the dataset's own words are left out, so babble never says a class.
BABBLE_WORDS = ("the", "and", "maybe", "later", "water", "paper", "number", "coffee", "window",
                "morning", "yellow", "because", "people", "little", "table", "sunday")

# A word also names its class folder: letters and digits, then ' and - too.
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")


def check_words(words: Sequence[str] | str, flag: str) -> list[str]:
  """The words of a sequence or comma-separated string, stripped.

  Raises:
    ValueError: none, one that cannot name a folder, or a repeat; naming `flag`.
  """
  if isinstance(words, str):
    words = words.split(",")
  words = [w.strip() for w in words if w.strip()]
  if not words:
    raise ValueError(f"{flag}: no words given")
  for w in words:
    if not _WORD.fullmatch(w):
      raise ValueError(f"{flag}: cannot synthesize {w!r}: a word must be letters/digits (plus ' "
                       "and -), since it also names its class folder")
  if len(set(words)) != len(words):
    raise ValueError(f"{flag}: duplicate words in {','.join(words)}")
  return words


def unknown_words(spec: Sequence[str] | str, words: Sequence[str]) -> list[str]:
  """The words `_unknown_` says: none, the words of `spec`, or (spec is one number N) N of them.

  Args:
    spec: (), words, or [N]: the first N of UNKNOWN_VOCABULARY not among `words`.
    words: the dataset's own words, which an unknown word must not be.

  Raises:
    ValueError: an unknown word that is also a word, or N beyond the vocabulary.
  """
  if isinstance(spec, str):
    spec = spec.split(",")
  spec = [s.strip() for s in spec if s.strip()]
  if not spec:
    return []
  taken = {w.lower() for w in words}
  if len(spec) == 1 and spec[0].isdigit():
    n = int(spec[0])
    free = [w for w in UNKNOWN_VOCABULARY if w not in taken]
    if not 1 <= n <= len(free):
      raise ValueError(f"--unknown_words={n}: choose 1 to {len(free)} words of the built-in "
                       "list, or name the words")
    return free[:n]
  chosen = check_words(spec, "--unknown_words")
  clash = [w for w in chosen if w.lower() in taken]
  if clash:
    raise ValueError(f"--unknown_words: {', '.join(clash)} also among --words")
  return chosen
