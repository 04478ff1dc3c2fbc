"""The persistent clip cache, kept importable from here: see audioclf/data/ (store, fill, command).

  python -m audioclf.cache --data_dir=data/speech_words    # fill every split
  python -m audioclf.cache --data_dir=... --info           # what is cached
  python -m audioclf.cache --cache_dir=... --verify        # check every byte
  python -m audioclf.cache --prune_days=30                 # delete what went unused for 30 days
"""

from audioclf.data.fill import decode_count, fill  # noqa: F401
from audioclf.data.keys import default_cache_dir  # noqa: F401
from audioclf.data.store import Store, info, prune, verify  # noqa: F401

if __name__ == "__main__":
  from audioclf.data import command  # pylint: disable=g-import-not-at-top
  command.run()
