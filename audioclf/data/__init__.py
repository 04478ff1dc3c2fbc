"""The data layer: the on-disk cache, its fill, the sampler and the input pipeline.

  keys.py       what a file is: content fingerprints, remembered by stat on this host
  store.py      the cache's files: format, names, writes, the checks a split passes on open
  fill.py       filling a split (Fill), and fill(): every split ahead of time
  sampler.py    which clip comes when, and every random draw: pure functions of (seed, index)
  exit_guard.py ending a process with a pipeline that runs Python in it
  pipeline.py   input_fn: the assembly
  command.py    python -m audioclf.cache

Submodules import on use: `store`, `keys` and `fill` need no TensorFlow.
"""
