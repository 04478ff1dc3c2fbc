"""Recordings decoded once into the cache and served as one tensor: background noise, impulse responses.

Speech Commands ships minutes of noise in `_background_noise_/`; the
manifest lists those recordings (`Manifest.noise`: --noise_dir, else
<data>/_background_noise_). They go into the store as a split of their own,
like any clips: each decoded once (by content key, bad files under the
on_bad_file policy), checked on open, and read memory-mapped, so a training
step never opens a file. `Recordings.excerpts` cuts windows out of them where
the noise augmentation's draws say (augmentations/noise.py); without recordings the sampler
falls back to white noise. Room impulse responses (--rir_dir) are
recordings too, cached the same way as a split of their own (audioclf.data.rir).
"""

from __future__ import annotations

import copy
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from audioclf.compat import xla as compat_xla
from audioclf.data.augmentations import program
from audioclf.data.augmentations.noise import noise_level
from audioclf.data import cache_format
from audioclf.data import fill as fill_lib
from audioclf.data import store as store_lib
from audioclf.data.manifest import Example
from audioclf.data.window import cut, split_tensor
from audioclf.params import Params


class Recordings:
  """The usable recordings as one tensor of samples, with each one's offset and length in it."""

  def __init__(self, source: tf.Tensor, offsets: np.ndarray, lengths: np.ndarray,
               scale: Optional[float], rms: np.ndarray, peaks: Optional[np.ndarray] = None,
               split: Optional[cache_format.Split] = None):
    self._source, self.scale = source, scale
    self._split = split  # The cache split `source` maps, if any (`mapped`).
    self._mapped = False
    self.offsets = tf.constant(offsets, tf.int64)
    self.lengths = tf.constant(lengths, tf.int64)
    self._rms = tf.constant(np.maximum(rms, 1e-6), tf.float32)  # Digital silence mixes nothing.
    self.count = len(lengths)
    self.longest = int(np.max(lengths)) if len(lengths) else 0
    # For from_peaks: each one's offset, length, RMS and loudest sample (from its start).
    self._arrays = (np.asarray(offsets, np.int64), np.asarray(lengths, np.int64),
                    np.asarray(rms, np.float64),
                    np.zeros(len(lengths), np.int64) if peaks is None else np.asarray(peaks))

  def from_peaks(self, most: int) -> "Recordings":
    """The same recordings, each from its loudest sample on and at most `most` samples long.

    What an impulse response is convolved with: its direct path at tap 0, so
    the reverberant clip is not delayed by the response's lead-in.
    """
    offsets, lengths, rms, peaks = self._arrays
    return Recordings(self._source, offsets + peaks, np.minimum(lengths - peaks, most),
                      self.scale, rms, split=self._split)

  @property
  def source(self) -> tf.Tensor:
    """The recordings' samples, end to end: one tensor (`mapped`: an op that maps the split)."""
    if self._mapped:
      return split_tensor(self._split)[0]
    return self._source

  def mapped(self) -> "Recordings":
    """The same recordings, their samples mapped from the cache where a graph using them runs.

    A tf.data service worker's graph then names the split's file (the same
    path on every host) instead of carrying every sample, which for hours of
    background noise it could not. Recordings decoded in memory (a read-only
    cache) have no file: those travel in the graph.
    """
    if self._split is None:
      return self
    out = copy.copy(self)
    out._mapped = True
    return out

  def _pick(self, which: tf.Tensor) -> tf.Tensor:
    return tf.minimum(tf.cast(which * self.count, tf.int64), self.count - 1)

  def rms(self, which: tf.Tensor) -> tf.Tensor:
    """The RMS of each whole recording `which` picks (as `excerpts` does), float32."""
    return tf.gather(self._rms, self._pick(which))

  @classmethod
  def load(cls, params: Params, examples: Sequence[Example], name: str = "noise",
           decodes: Optional[fill_lib.Decodes] = None) -> Optional["Recordings"]:
    """The recordings of `examples` from the cache (filled first if need be); None without any.

    A recording skipped as bad (on_bad_file="skip") is left out, with a
    warning; when none is left, the sampler falls back to what it draws
    itself (white noise; synthetic impulse responses). `name` is the cache
    split's ("noise", "rir"); `decodes`, the caller's count of files decoded.
    """
    if not examples:
      return None
    store = store_lib.Store.for_params(params)
    store.prepare()
    split, job = fill_lib.fill_examples(store, examples, params, name=name,
                                        read_only_decode=False, decodes=decodes)
    if split is not None:
      keep = np.flatnonzero(split.kept)
      offsets, lengths = split.offsets[keep], split.lengths[keep]
      source, scale = split_tensor(split)
      clips = [split.raw(i) for i in keep]
    else:  # A read-only cache: decoded in memory, once per process.
      decoded = [job.decode(row) for row in range(len(examples))]
      keep = np.flatnonzero([len(c) > 0 for c in decoded])
      clips = [decoded[i] for i in keep]
      lengths = np.array([len(c) for c in clips], np.int64)
      offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
      source = tf.constant(np.concatenate(clips or [np.zeros(0, np.float32)]))
      scale = None
    what = _WHAT[name]
    if len(keep) < len(examples):
      logging.warning("audioclf: %d of %d %s were skipped as bad", len(examples) - len(keep),
                      len(examples), what[0])
    if not len(keep):
      logging.warning("audioclf: no usable %s: %s instead", what[1], what[2])
      return None
    rms = np.array([_rms(c) for c in clips]) * (scale or 1.0)
    peaks = np.array([np.argmax(np.abs(c)) for c in clips], np.int64)
    return cls(source, offsets, lengths, scale, rms, peaks, split)

  def excerpts(self, which: tf.Tensor, where: tf.Tensor, n: int) -> tf.Tensor:
    """float32 [len(which), n]: an excerpt of recording floor(which * count) for each draw.

    `which` and `where` are uniform in [0, 1): `where` places the excerpt
    anywhere in its recording; a recording shorter than `n` is zero-padded.
    """
    return _samples(self.source, self.scale, *self._places(which, where, n), n, gather=False)

  def add_to(self, waves: tf.Tensor, chosen: tf.Tensor, which: tf.Tensor, where: tf.Tensor,
             absolute: tf.Tensor, relative: tf.Tensor) -> tf.Tensor:
    """`waves` with an excerpt (`excerpts`) added to each `chosen` row (bool [batch]).

    At absolute + relative x the row's RMS ([batch] each), and only to the
    chosen rows: copying the excerpts is most of the cost.
    """
    return program.apply(waves, None, [self.add_step(chosen, which, where, absolute, relative,
                                                     waves.shape[-1])])[0]

  def add_step(self, chosen: tf.Tensor, which: tf.Tensor, where: tf.Tensor, absolute: tf.Tensor,
               relative: tf.Tensor, n: int) -> program.Step:
    """`add_to` of clips of `n` samples as a program.Step."""
    return program.Step(_add_excerpts, (chosen, self.source, *self._places(which, where, n),
                                        tf.cast(absolute, tf.float32),
                                        tf.cast(relative, tf.float32)), (("scale", self.scale),))

  def _places(self, which, where, n: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Each excerpt's recording's offset and length in `source`, and its start in the recording."""
    r = self._pick(which)
    length, offset = tf.gather(self.lengths, r), tf.gather(self.offsets, r)
    span = tf.maximum(length - n, 0) + 1
    start = tf.minimum(tf.cast(where * tf.cast(span, where.dtype), tf.int64), span - 1)
    return offset, length, start


def _add_excerpts(waves, chosen, source, offset, length, start, absolute, relative,
                  scale: Optional[float]):
  n = waves.shape[-1]

  def add(rows, offset, length, start, absolute, relative):
    return rows + noise_level(rows, absolute, relative)[:, None] * _samples(
        source, scale, offset, length, start, n, gather=compat_xla.XLA)

  return program.on_rows(add, waves, chosen, offset, length, start, absolute, relative)


def _samples(source, scale: Optional[float], offset, length, start, n: int,
             gather: bool) -> tf.Tensor:
  """float32 [len(offset), n]: samples [start, start + n) of each recording, zero past its end."""
  if gather:
    # One gather over excerpts x n indices, which XLA makes a loop of copies.
    samples = cut(source, offset, length, start, n)
  else:
    # A slice per excerpt (a copy of n samples): a third of the time of one
    # gather over batch x n indices as plain ops. (Unrolled over a static
    # batch it costs a quarter less per batch, but seconds to build.)
    samples = tf.map_fn(lambda ols: cut(source, ols[0], ols[1], ols[2], n),
                        tf.stack([offset, length, start], 1), fn_output_signature=source.dtype)
  samples = tf.cast(samples, tf.float32)
  return samples * scale if scale is not None else samples


# Split name -> (what its files are, one of them, what the sampler does without any).
_WHAT = {"noise": ("background recordings", "background recording", "mixing white noise"),
         "rir": ("impulse responses", "impulse response", "synthetic ones")}


def _rms(samples: np.ndarray) -> float:
  x = np.asarray(samples, np.float32)
  return float(np.sqrt(np.dot(x, x) / len(x)))
