"""Sharded reading: each worker's share of the file order, chosen before anything is read."""

import numpy as np
import pytest

from audioclf.data import manifest as manifest_lib
from audioclf.data import pipeline
from audioclf.data import sampler as sampler_lib


def test_shards_of_an_epoch_hold_each_file_once(tone_params):
  params = tone_params.replace(batch_size=1)
  n = 10

  def rows(shard, count):
    s = sampler_lib.Sampler(params, n, shard)
    return [int(s.example(g)) for g in range(count)]

  whole = rows(None, 2 * n)
  epochs = [rows((i, 3), 2 * len(range(i, n, 3))) for i in range(3)]
  for i, got in enumerate(epochs):
    share = len(range(i, n, 3))
    # Each epoch of shard i is every third file of that epoch's permutation, from i on.
    assert got[:share] == whole[i:n:3]
    assert got[share:] == whole[n + i:2 * n:3]
  assert sorted(r for i, got in enumerate(epochs) for r in got[:len(range(i, n, 3))]) \
      == list(range(n))
  with pytest.raises(ValueError, match="shard"):
    sampler_lib.Sampler(params, n, (2, 2))


def test_sharded_evaluation_reads_the_split_once_between_shards(tone_params):
  manifest = manifest_lib.load(tone_params)
  params = tone_params.replace(batch_size=4)
  pipeline.fill_cache(params, manifest, splits=("validation",))
  whole = [(w, y) for w, y in pipeline.input_fn(params, "eval", manifest=manifest).unbatch()
           .as_numpy_iterator()]
  shards = [[(w, y) for w, y in pipeline.input_fn(params, "eval", manifest=manifest, shard=(i, 2))
             .unbatch().as_numpy_iterator()] for i in range(2)]
  assert len(shards[0]) + len(shards[1]) == len(whole) == len(manifest.split("validation"))
  # Shard i holds every second clip of the evaluation order, from i on.
  for i in range(2):
    for (w, y), (w0, y0) in zip(shards[i], whole[i::2]):
      assert y == y0 and np.array_equal(w["waveform"], w0["waveform"])


def test_a_sharded_reader_needs_the_split_cached(tone_params, tmp_path):
  params = tone_params.replace(cache_dir=str(tmp_path / "empty"))
  with pytest.raises(manifest_lib.DataError, match="not in the cache"):
    pipeline.input_fn(params, "eval", shard=(0, 2))


@pytest.mark.slow
def test_a_shard_draws_the_same_augmentations_rebuilt_or_resumed(tone_params):
  from test_pipeline import EVERY_AUGMENTATION, assert_same_batches, batches_of
  params = tone_params.replace(batch_size=3, **EVERY_AUGMENTATION)
  manifest = manifest_lib.load(params)
  pipeline.fill_cache(params, manifest, splits=("train",))

  def shard(i, start=0, steps=4):
    return batches_of(pipeline.input_fn(params, "train", manifest=manifest, shard=(i, 2),
                                        seed_offset=start), steps)

  first = shard(0)
  assert_same_batches(shard(0), first)
  assert_same_batches(shard(0, start=2, steps=2), first[2:])
  other = shard(1)
  assert not any(np.array_equal(a[0], b[0]) for a, b in zip(first, other))  # Keyed apart.
