"""`input_fn`: the one tf.data pipeline that feeds the Estimator, Keras fit and the tuner.

Two builders, each a run of steps: `make_for_train` (served, warm or cold
batches of the sampler's rows and draws) and `make_for_inference` (every
clip once, in order); input_fn picks one by mode. Assembly only: which
clips and draws come when is `sampler`, the cache files and their checks
are `store`, decoding and writing a split is `fill`; a cached split is read
by `batches` (warm, or served by a tf.data service), an uncached one by
`cold`, which writes it as the first epoch passes; every path cuts its
windows with `window`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from audioclf.data import batches as batches_lib
from audioclf.data import cache_format
from audioclf.data import cold as cold_lib
from audioclf.data import manifest as manifest_lib
from audioclf.data import noise, rir
from audioclf.data import service as dataservice
from audioclf.data import store as store_lib
from audioclf.data.fill import Decodes, Fill, fill
from audioclf.data.manifest import Manifest
from audioclf.data.recent import Recent
from audioclf.data.sampler import Sampler
from audioclf.params import MODES, ParamError, Params

_DEFAULT_SPLIT = {"train": "train", "eval": "validation", "infer": "validation"}


class Process:
  """What input_fn's datasets share in a process: the last warm ones built, and the files decoded.

  input_fn's callers (the Estimator, Keras' fit and evaluate, every tuner
  trial) hold nothing between calls, so the process owns these (`PROCESS`)
  and input_fn hands them to the builders; a caller that wants another
  lifetime calls the builders with its own.

  `datasets`: the last few warm datasets built eagerly, by everything they
  depend on (`_reuse_key`: the fields of params the data layer reads, so
  tuner trials that change only the model or the optimizer share one; the
  builder, split, start and shard; the split's content key and data file, a
  refilled split being another file; the recordings' fingerprints), so a
  changed file, flag or cache builds anew. A dataset is a description, not a
  running pipeline: each `iter` of it starts its own, so handing one out
  twice is safe; a graph's dataset belongs to that graph and is not kept.
  `decodes`: the files the builders' passes and `fill_cache` decoded from
  their source (a metric: the tuner's records, the tests).
  """

  def __init__(self, size: int = 8):
    self.datasets = Recent(size)
    self.decodes = Decodes()


PROCESS = Process()


def _reuse_key(params, split, manifest, rows, first_batch, shard, native_read,
               mixes_noise, reverberates):
  """What names a warm eager dataset for reuse, or None when it cannot be reused."""
  if (rows.cached is None or params.data_service or not isinstance(first_batch, int)
      or not tf.executing_eagerly()):  # A graph's dataset belongs to that graph.
    return None
  # The same warm dataset again (Keras' evaluate, every tuner trial, a
  # loop of fits): reuse the one built, which saves its construction.
  fingerprints = rows.store.fingerprints.of
  return (params.data_key(), split, rows.name, first_batch, shard, native_read, rows.base,
          rows.cached.identity, rows.labels.tobytes(),
          tuple(fingerprints(manifest.noise)) if mixes_noise else (),
          tuple(fingerprints(manifest.rirs)) if reverberates else ())


def input_fn(params: Params, mode: str, split: Optional[str] = None,
             manifest: Optional[Manifest] = None,
             seed_offset: Union[None, int, tf.Tensor] = None,
             shard: Optional[tuple[int, int]] = None,
             native_read: bool = False) -> tf.data.Dataset:
  """The dataset for `mode`: `make_for_train`'s, or for "eval" and "infer" `make_for_inference`'s.

  Mode "train" reads the train split, shuffled and repeated forever; "eval"
  and "infer" read the validation split (or `split`) once, in a fixed order.
  Decoded clips come from the persistent cache; the first pass over a split
  decodes and fills it, every later call and process reads it. With a
  shuffle seed, batch k is the same bits whether the cache was cold or warm,
  and whatever the parallelism (see `sampler`). A warm dataset built again
  with what it reads unchanged is the one built before (`PROCESS`).

  Args:
    params: the run's parameters.
    mode: "train", "eval" or "infer" (tf.estimator.ModeKeys values).
    split: "train", "validation" or "test"; defaults by mode as above.
    manifest: a manifest already loaded from `params` (saves a folder scan).
    seed_offset: in training, the step to start at (`make_for_train`).
    shard: (index, count): read only this share of the file order
      (`make_for_train`, `make_for_inference`).
    native_read: on a warm cache, cut windows with native ops only (a tf.data
      service worker's need), at about half the speed of the default cut. The same bits.

  Returns:
    A tf.data.Dataset of ({"waveform": float32 [batch, clip_samples]},
    int32 [batch]), or in training with mixup, soft labels float32 [batch,
    classes] (`element_spec`). Never an iterator: the Estimator and model.fit
    take it as is.

  Raises:
    ValueError: unknown mode or split.
    params.ParamError: a training batch larger than the split, or a
      --data_service run that cannot be served.
    manifest_lib.DataError: the data source is unusable, or the split is empty.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  if mode == "train":
    return make_for_train(params, split or _DEFAULT_SPLIT[mode], manifest, seed_offset, shard,
                          native_read, PROCESS)
  return make_for_inference(params, split or _DEFAULT_SPLIT[mode], manifest, shard,
                            native_read, PROCESS)


def make_for_train(params: Params, split: str = "train", manifest: Optional[Manifest] = None,
                   seed_offset: Union[None, int, tf.Tensor] = None,
                   shard: Optional[tuple[int, int]] = None, native_read: bool = False,
                   process: Optional[Process] = None) -> tf.data.Dataset:
  """Training batches of `split`, shuffled and repeated forever: batch k is the sampler's k.

  Args: as `input_fn`'s, and
    seed_offset: the training step to start at: a resumed run at step k gets
      the batches k, k+1, ... of the run it resumes. Default: the global step
      when called inside a graph that has one (as tf.estimator does), else 0.
      The Keras engine passes its initial step.
    shard: (index, count): every count-th file of each epoch's permutation
      from `index` on, chosen before anything is read, as each worker of a
      cluster does. The split must be in the cache already (`fill_cache`).
    process: where warm datasets are kept for reuse and decodes counted, if
      anywhere (`Process`).
  """
  params.validate()
  manifest = manifest or manifest_lib.load(params)
  rows = _SplitRows.of(params, manifest, split)
  first_batch = _first_batch(seed_offset)
  mixes_noise = manifest.noise and (params.noise_prob > 0 or rows.silence is not None)
  reverberates = manifest.rirs and params.reverb_prob > 0
  built, reuse, found = _kept(process, params, "train", manifest, rows, first_batch, shard,
                              native_read, mixes_noise, reverberates)
  if found is not None:
    return found
  decodes = process.decodes if process else None
  sampler = _sampler(params, manifest, rows, shard, mixes_noise, reverberates, decodes)
  _check_training(params, manifest, rows, shard, sampler)
  if params.data_service:
    # The service's workers cut (and augment) each batch: the trainer only receives them.
    ds = batches_lib.served(params, rows.cached, rows.labels, sampler, first_batch)
  elif rows.cached is not None:
    # Warm: batch k's windows cut out of the memory-mapped split.
    warm = batches_lib.warm_native if native_read else batches_lib.warm
    ds = warm(params, rows.cached, rows.labels, sampler, True, first_batch)
  else:
    # Cold: each file decoded as the first epoch reaches it; the split written as it ends.
    ds = _cold(params, rows, sampler, True, first_batch, decodes)
  return _prefetched(params, ds, sampler, True, built, reuse)


def make_for_inference(params: Params, split: str = "validation",
                       manifest: Optional[Manifest] = None,
                       shard: Optional[tuple[int, int]] = None, native_read: bool = False,
                       process: Optional[Process] = None) -> tf.data.Dataset:
  """Every clip of `split` once, in the split's order, its window at the centre.

  Args: as `input_fn`'s, and
    shard: (index, count): every count-th file from `index` on; the split
      must be in the cache already (`fill_cache`).
    process: where warm datasets are kept for reuse and decodes counted, if
      anywhere (`Process`).
  """
  params.validate()
  manifest = manifest or manifest_lib.load(params)
  rows = _SplitRows.of(params, manifest, split)
  # Only _silence_ clips take noise at inference; nothing reverberates.
  mixes_noise = manifest.noise and rows.silence is not None
  built, reuse, found = _kept(process, params, "inference", manifest, rows, 0, shard,
                              native_read, mixes_noise, False)
  if found is not None:
    return found
  decodes = process.decodes if process else None
  sampler = _sampler(params, manifest, rows, shard, mixes_noise, False, decodes)
  if rows.cached is not None:
    # Warm: each clip's window cut out of the memory-mapped split.
    warm = batches_lib.warm_native if native_read else batches_lib.warm
    ds = warm(params, rows.cached, rows.labels, sampler, False, 0)
  else:
    # Cold: each file decoded in turn; the split written as the pass ends.
    ds = _cold(params, rows, sampler, False, 0, decodes)
  return _prefetched(params, ds, sampler, False, built, reuse)


def _sampler(params: Params, manifest: Manifest, rows: "_SplitRows",
             shard: Optional[tuple[int, int]], mixes_noise, reverberates,
             decodes: Optional[Decodes]) -> Sampler:
  """The sampler of `rows`, with the recordings it mixes in (cached first where they are not)."""
  recordings = (noise.Recordings.load(params, manifest.noise, decodes=decodes)
                if mixes_noise else None)
  unknown = (manifest.label_id(manifest_lib.UNKNOWN) if manifest_lib.UNKNOWN in manifest.labels
             else None)
  return Sampler(params, len(rows.examples), shard, recordings, rows.silence,
                 labels=rows.labels, num_classes=len(manifest.labels),
                 rirs=rir.load(params, manifest.rirs, decodes) if reverberates else None,
                 unknown_label=unknown)


def _kept(process: Optional[Process], *depends_on) -> tuple:
  """(where to keep the dataset, its key, the one kept under it): Nones without a `process`."""
  if process is None:
    return None, None, None
  reuse = _reuse_key(*depends_on)
  return process.datasets, reuse, process.datasets.get(reuse) if reuse else None


def _prefetched(params: Params, ds: tf.data.Dataset, sampler: Sampler, training: bool,
                built: Optional[Recent], reuse) -> tf.data.Dataset:
  """`ds` prefetched, with the pipeline's options; kept in `built` under `reuse`, where given."""
  # Prefetch last: the next batches are prepared while the model trains on this one.
  ds = ds.prefetch(batches_lib.AUTOTUNE).with_options(
      batches_lib.options(params, training, sampler.augments(training)))
  if reuse:
    built.put(reuse, ds)
  return ds


def _named(params: Params, split: str) -> str:
  """How errors name a split: "the 'train' split of <data_dir or manifest>"."""
  return f"the {split!r} split of {params.manifest or params.data_dir}"


def _examples_of(params: Params, manifest: Manifest, split: str) -> list[manifest_lib.Example]:
  """The split's examples; manifest_lib.DataError naming the split where it has none."""
  examples = manifest.split(split)
  if not examples:
    raise manifest_lib.DataError(
        f"{_named(params, split)} is empty "
        f"({manifest.counts()}); add files or adjust validation/testing percentages")
  return examples


@dataclasses.dataclass(frozen=True)
class _SplitRows:
  """A split as input_fn reads it: its rows, their labels, and its place in the cache.

  The split's files are rows 0 .. len(files) - 1 (what the cache holds); its
  virtual _silence_ clips follow them, rows of no samples.
  """

  name: str
  examples: list[manifest_lib.Example]
  files: list[manifest_lib.Example]
  labels: np.ndarray  # int32, a row's label id.
  silence: Optional[int]  # The _silence_ label's id where the split has such clips, else None.
  store: store_lib.Store
  fingerprints: list  # The files' content keys.
  base: str  # The split's name in the cache.
  cached: Optional[cache_format.Split]  # The split as cached, or None where it is not yet.

  @classmethod
  def of(cls, params: Params, manifest: Manifest, split: str) -> _SplitRows:
    """Raises manifest_lib.DataError where the split has no examples."""
    examples = _examples_of(params, manifest, split)
    files = manifest.files(split)
    store = store_lib.Store.for_params(params)
    fingerprints = store.fingerprints.of(files)
    base = store.split_base(fingerprints)
    return cls(split, examples, files,
               np.asarray([manifest.label_id(e.label) for e in examples], np.int32),
               manifest.label_id(manifest_lib.SILENCE) if len(files) < len(examples) else None,
               store, fingerprints, base, store.open(base, len(files)))


def _cold(params: Params, rows: _SplitRows, sampler: Sampler, training: bool,
          first_batch, decodes: Optional[Decodes]) -> tf.data.Dataset:
  """The cold pass over `rows`, which fills the split as it goes (`cold`)."""
  if sampler.shard[1] > 1:
    # The cold pass writes the split from the files it decodes: a share of them cannot.
    raise manifest_lib.DataError(
        f"{_named(params, rows.name)} is not in the cache {rows.store.root!r} yet, and a "
        "sharded reader needs it there: fill it first (pipeline.fill_cache, or python -m "
        "audioclf cache --flagfile=...)")
  job = Fill(rows.store, rows.files, rows.fingerprints, params, rows.base, decodes)
  return cold_lib.cold(params, job, rows.labels, sampler, training, first_batch)


def _check_training(params: Params, manifest: Manifest, rows: _SplitRows,
                    shard: Optional[tuple[int, int]], sampler: Sampler) -> None:
  """Raises where a training dataset of `rows` cannot be built as asked.

  Raises:
    params.ParamError: a batch larger than the split, or a --data_service run
      that cannot be served.
    manifest_lib.DataError: a --data_service run whose split is not cached.
  """
  if params.batch_size > sampler.epoch_size:
    # Batches run on across epochs: one larger than the split would repeat files within it.
    share = f" (shard {shard[0]} of {shard[1]}: {sampler.epoch_size})" if shard else ""
    raise ParamError(f"--batch_size={params.batch_size}: must be at most {sampler.epoch_size}, "
                     f"the examples of {_named(params, rows.name)} ({sampler.n}{share})")
  if not params.data_service:
    return
  if rows.silence is not None:
    raise ParamError(f"--data_service={params.data_service} does not serve _silence_ clips "
                     "(--silence_percent) yet: train without one of them")
  if rows.cached is None:
    raise manifest_lib.DataError(
        f"{_named(params, rows.name)} is not in the cache {rows.store.root!r}: the trainer "
        "names the split the service's workers serve by its cache; fill it first "
        "(python -m audioclf cache --flagfile=...)")
  if sampler.shard[1] > 1:
    raise ParamError(f"--data_service={params.data_service} feeds one trainer; several "
                     "(a multi-worker cluster) are not supported")
  if tf.executing_eagerly():  # The Estimator checks before it builds its graph.
    dataservice.check_workers(params, manifest, rows.name)


def element_spec(params: Params, mode: str, num_classes: int) -> tuple:
  """The structure of input_fn(params, mode)'s batches, of any batch size."""
  if mode == "train" and params.mixup_alpha:
    labels = tf.TensorSpec([None, num_classes], tf.float32)
  else:
    labels = tf.TensorSpec([None], tf.int32)
  return {"waveform": tf.TensorSpec([None, params.clip_samples], tf.float32)}, labels


def fill_cache(params: Params, manifest: Manifest,
               splits: Sequence[str] = ("train", "validation")) -> int:
  """`fill` of `splits`; returns the number of files decoded (counted in `PROCESS` too).

  For readers that need a whole split cached before they start: tuner trials
  shorter than an epoch, and the sharded readers of a cluster's workers.
  """
  return sum(r["decoded"] for r in fill(params, splits, manifest,
                                        decodes=PROCESS.decodes).values())


def cached_clips(params: Params, manifest: Manifest, split: str) -> int:
  """The clips an evaluation pass over a cached split reads: its files less those skipped as bad.

  Raises:
    manifest_lib.DataError: the split is empty, or not in the cache.
  """
  examples = _examples_of(params, manifest, split)
  store = store_lib.Store.for_params(params)
  cached = store.open(store.split_base(store.fingerprints.of(examples)), len(examples))
  if cached is None:
    raise manifest_lib.DataError(f"the {split!r} split is not in the cache {store.root!r}; "
                                 "fill it first (pipeline.fill_cache)")
  return int(np.count_nonzero(cached.kept))


def every_file_read(params: Params, manifest: Manifest, split: str = "train") -> Optional[bool]:
  """Whether some pass has read every file of `split` (so a bad one would have been met).

  The cache holds a split whole only once a pass decoded every file of it
  (one that failed under on_bad_file="fail" leaves it unwritten); a run that
  ended before its first epoch did leaves it unwritten too. Waits for this
  process's writer of the split, if one is still at work. None where the
  cache cannot be written: there is no record to tell.
  """
  store = store_lib.Store.for_params(params)
  if not store.writable:
    return None
  base = store.split_base(store.fingerprints.of(manifest.files(split)))
  store.wait_for_writers(base)
  return store.complete(base)


def _first_batch(seed_offset):
  if seed_offset is not None:
    return seed_offset
  if not tf.executing_eagerly():
    step = tf.compat.v1.train.get_global_step()
    if step is not None:
      # Read when the Estimator initializes the iterator, after a restore.
      return tf.cast(step, tf.int64)
  return 0

