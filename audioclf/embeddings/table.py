"""The embedding split: a frozen front end's output for every row and view of the train split, cached.

It lives beside its clip split (the same decode folder, `data.store.Store`)
and in its format (`data.cache_format`): a row per (clip row i, view k), at
i * views + k, float32, each with its CRC-32; the marker, written last, says
its kind, its source (the clip split's key) and its views. So it is checked
as a clip split is when opened (a damaged one is reported, its marker
removed, and it is embedded again: never served), and `cache --info`,
`--verify` and `--prune_days` know it. Its key hashes all it depends on:
the clip split's key, the front end (version, geometry, frozen weights:
`Boundary.key_parts`), the rows' labels, the views' count and seed, and the
augmentations and recordings that make the views. The first run embeds
(the cold pass); every later one with the same key reads.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
from absl import logging

from audioclf.data import manifest as manifest_lib
from audioclf.data import noise, rir
from audioclf.data import keys as keys_lib
from audioclf.data import store as store_lib
from audioclf.data.cache_format import PCM16, NotNative
from audioclf.data.pipeline import fill_cache
from audioclf.embeddings import boundary as boundary_lib
from audioclf.embeddings import views as views_lib
from audioclf.model import build as models
from audioclf.params import Params

KIND = "embeddings"
# Bump when what a view is changes (its draws, its cut): older tables are then never read.
VERSION = 1
# The fields that make the views, besides the seed and their count: a new augmentation joins them.
VIEW_FIELDS = ("time_shift_seconds", "noise_prob", "noise_snr_db", "speed_perturb",
               "pitch_shift_semitones", "tempo_perturb", "pitch_tempo_prob", "reverb_prob",
               "reverb_rt60", "gain_db")


@dataclasses.dataclass(frozen=True)
class Table:
  """The train split's embeddings: values float32 [rows, views, *shape], and each row's label."""

  base: str  # The split's path prefix in the cache.
  values: np.ndarray
  labels: np.ndarray  # int32 [rows].
  num_classes: int
  embedded: bool  # Whether this call embedded them (the cold pass) rather than read them.
  skipped: int  # Files of the split skipped as bad (--on_bad_file=skip): rows of no clip.

  @property
  def views(self) -> int:
    return self.values.shape[1]


@dataclasses.dataclass(frozen=True)
class Source:
  """The train split as the views need it: its rows' labels, its cached clips, its recordings."""

  store: store_lib.Store
  clips: object  # cache_format.Split of its files.
  labels: np.ndarray
  silence_label: object  # The _silence_ label's id where the split has such rows, else None.
  noise_keys: tuple
  rir_keys: tuple


def source_of(params: Params, manifest: manifest_lib.Manifest) -> Source:
  """The train split's clips, filled into the cache first where they are not yet."""
  fill_cache(params, manifest, splits=("train",))
  store = store_lib.Store.for_params(params)
  examples, files = manifest.split("train"), manifest.files("train")
  clips = store.open(store.split_base(store.fingerprints.of(files)), len(files))
  if clips is None:
    raise manifest_lib.DataError(f"the 'train' split is not in the cache {store.root!r}: "
                                 "its embeddings are made from it")
  silence = (manifest.label_id(manifest_lib.SILENCE) if len(files) < len(examples) else None)
  fingerprints = store.fingerprints.of
  return Source(store, clips, np.asarray([manifest.label_id(e.label) for e in examples],
                                          np.int32), silence,
                 tuple(fingerprints(manifest.noise)), tuple(fingerprints(manifest.rirs)))


def key(params: Params, boundary: boundary_lib.Boundary, source: Source) -> str:
  """The key of the table of `params`' views through `boundary`'s front end, of `source`."""
  return keys_lib.digest(
      KIND, VERSION, "clips", os.path.basename(source.clips.base), *boundary.key_parts(),
      "shape", *boundary.shape,
      "views", params.embedding_views, "seed", params.seed, "chunk", views_lib.CHUNK,
      "labels", keys_lib.digest(*source.labels.tolist()), "silence", source.silence_label,
      *(f"{name}={getattr(params, name)}" for name in VIEW_FIELDS),
      "noise", *source.noise_keys, "rirs", *source.rir_keys)


def load_or_embed(params: Params, boundary: boundary_lib.Boundary,
                  manifest: manifest_lib.Manifest) -> Table:
  """The train split's table: read from the cache, else embedded now and written there.

  Raises:
    manifest_lib.DataError: the train split is empty or cannot be cached.
    cache_format.CacheWriteError: the table could not be written (a full disk).
  """
  source = source_of(params, manifest)
  views, rows = params.embedding_views, len(source.labels)
  config = key(params, boundary, source)
  row_keys = [keys_lib.digest(config, i, k) for i in range(rows) for k in range(views)]
  base = source.store.split_base(row_keys)
  shape = (rows, views, *boundary.shape)
  found = source.store.open(base, rows * views)
  if found is not None and found.samples == int(np.prod(shape)):
    values = np.array(found.blob).reshape(shape)
    return Table(base, values, source.labels, len(manifest.labels), embedded=False,
                 skipped=len(source.clips.skipped))
  values = _embed(params, boundary, manifest, source, shape, base)
  if source.store.writable:
    flat = values.reshape(rows * views, -1)

    def row_of(row: int, dtype: str) -> np.ndarray:
      if dtype == PCM16:
        raise NotNative()  # Embeddings are float32.
      return flat[row]

    source.store.write_split(base, row_keys, row_of, marker={
        "kind": KIND, "source": os.path.basename(source.clips.base),
        "about": {"views": views, "shape": list(boundary.shape), "seed": params.seed}})
  return Table(base, values, source.labels, len(manifest.labels), embedded=True,
               skipped=len(source.clips.skipped))


def _embed(params: Params, boundary: boundary_lib.Boundary, manifest: manifest_lib.Manifest,
           source: Source, shape: tuple, base: str) -> np.ndarray:
  """The cold pass: every view of every row through the frozen front end, CHUNK rows at a time."""
  mixes = manifest.noise and (params.noise_prob > 0 or source.silence_label is not None)
  reverberates = manifest.rirs and params.reverb_prob > 0
  views = views_lib.Views(params, source.clips, source.labels,
                          recordings=noise.Recordings.load(params, manifest.noise) if mixes
                          else None,
                          rirs=rir.load(params, manifest.rirs) if reverberates else None,
                          silence_label=source.silence_label, num_classes=len(manifest.labels))
  front_end = boundary.front_end
  logging.info("audioclf: embedding %d clips x %d views through the frozen front end into %s",
               shape[0], shape[1], base)
  start = time.perf_counter()
  values = np.zeros(shape, np.float32)
  for view in range(shape[1]):
    for chunk in range(views.chunks):
      rows, waves = views.batch(view, chunk)
      values[rows, view] = front_end.predict_on_batch(models.inputs(waves))
  logging.info("audioclf: embedded %d views in %.1f s", shape[0] * shape[1],
               time.perf_counter() - start)
  return values
