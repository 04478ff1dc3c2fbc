"""Keywords from text: spoken-word datasets in the Speech Commands layout, spoken by espeak-ng.

  from audioclf.synthesis import generate
  paths = generate("data/words", ["zero", "one", "two"], per_word=100, seed=0,
                   background_noise=True, held_out_speakers=5, unknown_words=["20"])

`python -m audioclf synthesize` runs it (audioclf.commands.synthesize).

  dataset.py     generate() and synthesize(): the layout, the stamp, reuse of a finished dataset
  settings.py    Settings: what a dataset is a pure function of; the layout's names; SynthesisError
  vocabulary.py  the default words, the words `_unknown_` draws from, the babble's fillers
  speakers.py    espeak-ng's English voices, the speaker pools, each clip's jitter
  clips.py       which speaker says which word into which file, and writing the clips
  espeak.py      espeak-ng through ctypes, in a fresh process per word
  render.py      a spoken word made a 1 s clip: level, offset, background noise
  noise.py       the `_background_noise_` recordings: noise colours, mains hum, babble
  folder.py      the dataset's folder, written whole or not at all

Needs the espeakng-loader wheel (pip install 'audioclf[synthesize]').
"""

import importlib

# The public names, imported on first use: `python -m audioclf.synthesis.espeak` (the worker)
# imports this package first and must not find itself imported already.
_API = {
    "generate": "audioclf.synthesis.dataset",
    "synthesize": "audioclf.synthesis.dataset",
    "noise_paths": "audioclf.synthesis.dataset",
    "held_out_paths": "audioclf.synthesis.dataset",
    "unknown_paths": "audioclf.synthesis.dataset",
    "Dataset": "audioclf.synthesis.dataset",
    "Settings": "audioclf.synthesis.settings",
    "SynthesisError": "audioclf.synthesis.settings",
}


def __getattr__(name):
  if name in _API:
    return getattr(importlib.import_module(_API[name]), name)
  raise AttributeError(f"module 'audioclf.synthesis' has no attribute {name!r}")


__all__ = list(_API)
