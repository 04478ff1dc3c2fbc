"""Room impulse responses for reverberation: recorded ones from --rir_dir, decoded once into the cache.

Recorded responses are recordings like the background noise: decoded once
into the cache as a split of their own ("rir"), read memory-mapped, each
served from its loudest sample (the direct path) on (`noise.Recordings`).
Without any, the sampler draws synthetic ones (augmentations/reverb.py).
Either way a response is at most a clip long: the clip's
samples after convolution depend on no later tap.
"""

from __future__ import annotations

from typing import Optional, Sequence

from audioclf.data.fill import Decodes
from audioclf.data.manifest import Example
from audioclf.data.noise import Recordings
from audioclf.params import Params


def load(params: Params, examples: Sequence[Example],
         decodes: Optional[Decodes] = None) -> Optional[Recordings]:
  """The impulse responses of `examples` from the cache (filled first if need be), or None.

  None without any usable file: then the sampler makes synthetic ones.
  """
  recordings = Recordings.load(params, examples, name="rir", decodes=decodes)
  return recordings.from_peaks(params.clip_samples) if recordings is not None else None

