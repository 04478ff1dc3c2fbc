"""Decoders by format: each file of this folder registers one, and `for_path` picks a file's.

  libsndfile.py  every format libsndfile reads, mixed to mono and resampled with soxr (the default)
  pcm16_wav.py   canonical PCM16 mono WAVs at the target rate: their words as they are, natively
                 in the graph; any other .wav goes to libsndfile

A decoder's name and version are part of the cache's decode key (`key`):
a new version is a new cache, never the clips the old one decoded. A new
format is a new file here that calls `register`. numpy only; no TensorFlow
(a decoder's graph twin imports it when it is asked for).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import pkgutil
from typing import Callable, Optional

import numpy as np

# (path, sample_rate, resample quality) -> float32 mono samples at sample_rate.
DecodeFn = Callable[[str, int, str], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Decoder:
  """A registered decoder: its name and version, the files it takes and how it reads them."""

  name: str
  version: int  # Bump when its samples change: the cache's key changes with it.
  extensions: tuple[str, ...]  # Lower case with the dot; () reads every file no other claims.
  decode: DecodeFn  # Raises decode.BadAudioError for a file that is not usable audio.
  # sample_rate -> a tf.function of a file's bytes (scalar tf.string) giving (ok, float32
  # samples): the same bits as `decode` where ok; where not, `decode` reads the file.
  graph: Optional[Callable[[int], Callable]] = None


_REGISTERED: dict[str, Decoder] = {}


def register(decoder: Decoder) -> Decoder:
  """Adds `decoder` under its name; returns it.

  Raises:
    ValueError: another decoder has that name, or claims one of its extensions.
  """
  if decoder.name in _REGISTERED:
    raise ValueError(f"a decoder named {decoder.name!r} is registered already")
  for other in _REGISTERED.values():
    shared = set(other.extensions) & set(decoder.extensions)
    if shared or not (other.extensions or decoder.extensions):
      raise ValueError(f"decoders {other.name!r} and {decoder.name!r} both claim "
                       f"{sorted(shared) or 'the files no other decoder claims'}")
  _REGISTERED[decoder.name] = decoder
  return decoder


@functools.cache
def _load() -> None:
  """Imports every module of this folder once, so that each registers its decoder."""
  for module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{module.name}")


def registered() -> dict[str, Decoder]:
  """Every decoder, by name."""
  _load()
  return dict(_REGISTERED)


def for_path(path: str) -> Decoder:
  """The decoder of `path`: the one that claims its extension, else the default."""
  return for_extension(os.path.splitext(path)[1].lower())


def for_extension(ext: str) -> Decoder:
  """The decoder of files ending in `ext` (lower case, with its dot; "" for none)."""
  _load()
  default = None
  for decoder in _REGISTERED.values():
    if ext in decoder.extensions:
      return decoder
    if not decoder.extensions:
      default = decoder
  if default is None:
    raise LookupError(f"no decoder reads {ext!r} files, and none is registered as the default")
  return default


def key() -> tuple[str, ...]:
  """Every decoder's name and version, "name/version" sorted: what the cache's decode key holds."""
  return tuple(sorted(f"{d.name}/{d.version}" for d in registered().values()))
