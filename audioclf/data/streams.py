"""Named random streams: the stateless key of every draw, from (seed, the stream's name, the draw's number).

A stream's draws depend on its name, the seed and the draw's number alone,
so adding or removing one augmentation leaves every other's draws as they
were (Grain's per-record keys, by name instead of by position).
"""

from __future__ import annotations

import hashlib

import tensorflow as tf


def stream_id(seed: int, name: str) -> int:
  """A stable signed 64-bit hash of (seed, stream name): the first half of the stream's keys."""
  digest = hashlib.blake2b(f"{int(seed)}\0{name}".encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(digest, "little", signed=True)


def stream_key(seed: int, name: str, at) -> tf.Tensor:
  """The stateless key int64 [2] of draw `at` of stream `name`: (stream_id, at)."""
  return tf.stack([tf.constant(stream_id(seed, name), tf.int64), tf.cast(at, tf.int64)])


class Streams:
  """The streams of one run (`seed`) as one shard (index, count) draws them, batch by batch."""

  def __init__(self, seed: int, shard: tuple[int, int] = (0, 1)):
    self.seed, self.shard = int(seed), tuple(shard)

  def key(self, name: str, k) -> tf.Tensor:
    """The key of stream `name`'s draws for batch k: shards' batches interleave, never meet."""
    index, count = self.shard
    return stream_key(self.seed, name, tf.cast(k, tf.int64) * count + index)
