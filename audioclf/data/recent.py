"""Recent: a bounded memo of the last values put, by key, that threads may share."""

from __future__ import annotations

import collections
import threading


class Recent:
  """The last `size` values put, by key: a bounded memo that threads may share."""

  def __init__(self, size: int):
    self._size, self._items = size, collections.OrderedDict()
    self._lock = threading.Lock()

  def get(self, key):
    with self._lock:
      value = self._items.get(key)
      if value is not None:
        self._items.move_to_end(key)
      return value

  def put(self, key, value) -> None:
    with self._lock:
      self._items[key] = value
      self._items.move_to_end(key)
      while len(self._items) > self._size:
        self._items.popitem(last=False)
