"""The augmentations after the cache: one file each, and the one order they apply in (ORDER).

  base.py         Augmentation (its Params fields, streams, draws, steps), Batch, Sources
  compose.py      Augmenter: a stream's augmentations, drawn per batch and run in ORDER
  program.py      Step and apply: a batch's augmentations as one program; on_rows
  tail.py         word tails: a keyword's window moved on to its word's end, labelled _unknown_
  spectra.py      what their FFTs share: fast sizes, passbands, the low-pass, levels
  pitch_tempo.py  pitch and tempo apart: a phase vocoder, then the voice's resampling
  reverb.py       convolution with a bank of impulse responses, recorded or synthetic
  speed.py        speed perturbation: the voice's one resampling
  noise.py        background recordings or white noise, at a drawn SNR
  gain.py         a gain in dB per example
  mixup.py        examples and their labels mixed in pairs

Adding one is a file here (a subclass of base.Augmentation whose `name` is
the file's), its Params fields (audioclf/params), its test, and its name in
ORDER. Its draws come from streams of its own (`streams`), so adding or
removing it moves no other draw.
"""

from __future__ import annotations

import importlib

# First where the window lies on the word (a tail, found before any noise
# hides the word); then in the order sound reaches a microphone: the voice
# (pitch and tempo), the room it is spoken in, the recording's speed (its room
# included, as Kaldi's speed perturbation of recorded audio), the background
# (at an SNR against the reverberant voice), the level (after the noise, so its
# SNR holds), then mixup, which mixes finished examples and their labels.
ORDER = ("tail", "pitch_tempo", "reverb", "speed", "noise", "gain", "mixup")


def registered() -> list[type]:
  """Each augmentation's class (base.Augmentation), in ORDER: the one of its file's name."""
  from audioclf.data.augmentations.base import Augmentation  # pylint: disable=g-import-not-at-top
  found = []
  for name in ORDER:
    module = importlib.import_module(f"{__name__}.{name}")
    found += [c for c in vars(module).values()
              if isinstance(c, type) and issubclass(c, Augmentation) and c.name == name]
  return found
