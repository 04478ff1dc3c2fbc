"""audioclf synthesize: keywords from text, a Speech Commands-layout dataset spoken by espeak-ng.

  python -m audioclf synthesize --words=zero,one,two --per_word=100 --out=data/digits
  python -m audioclf synthesize --words=yes,no,up,down --out=data/words --unknown_words=20 \
      --background_noise --held_out_speakers=5

Writes <out>/<word>/<speaker>_nohash_<n>.wav (16 kHz, 1 s) for every word, said
by --speakers voices at their own rates and pitches; with --unknown_words
<out>/_unknown_/ (other words, the label _unknown_), with --background_noise
<out>/_background_noise_/, with --held_out_speakers <out>/_held_out/ (unseen
voices, a test split of their own). The same flags give the same bytes; a
dataset already in --out with the same flags is kept (--force writes it again).
Ends with one line of JSON: the folder, the counts, whether it was reused.
Needs espeakng-loader (pip install 'audioclf[synthesize]'); no TensorFlow.
"""

from __future__ import annotations

import json
import time
from typing import Optional, Sequence

from absl import flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags
from audioclf.synthesis import dataset, settings

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  del argv
  if not FLAGS.out:
    raise settings.SynthesisError("--out: say where to write the dataset (e.g. --out=data/words)")
  start = time.time()
  chosen = settings.Settings(FLAGS.words, FLAGS.per_word, FLAGS.seed, FLAGS.speakers,
                             FLAGS.background_noise, FLAGS.noise_seconds, FLAGS.held_out_speakers,
                             FLAGS.unknown_words)
  made = dataset.synthesize(FLAGS.out, chosen, force=FLAGS.force, progress=FLAGS.progress)
  print(json.dumps({"out": made.root, "words": len(made.files) // FLAGS.per_word,
                    "clips": len(made.files), "unknown_clips": len(made.unknown_files),
                    "noise_files": len(made.noise_files),
                    "held_out_clips": len(made.held_out_files), "reused": made.reused,
                    "seconds": round(time.time() - start, 2)}), flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_synthesize_flags()
  cli.run(main, argv, __doc__, tensorflow=False)


if __name__ == "__main__":
  run()
