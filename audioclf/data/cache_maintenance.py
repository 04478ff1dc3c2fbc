"""Keeping the clip cache: what python -m audioclf cache --info, --verify and --prune_days do."""

from __future__ import annotations

import collections
import json
import os
import time
from typing import Optional

import numpy as np
from absl import logging

from audioclf import files
from audioclf.data import cache_format
from audioclf.data import keys as keys_lib
from audioclf.data.cache_format import (ENTRY, FORMAT, MARKER, SCHEMA, DamagedSplitError,
                                        check_files, marker_path)
from audioclf.data.store import Store


def info(store: Store) -> dict:
  """Size and completeness of one decode folder, and the splits derived from its clip splits."""
  counts = collections.Counter()
  derived = []
  for dirpath, _, names in os.walk(store.root):
    for name in names:
      kind = "entries" if dirpath.startswith(store.entries_dir) else "splits"
      try:
        counts[kind + "_bytes"] += os.path.getsize(os.path.join(dirpath, name))
      except FileNotFoundError:
        continue
      if name.endswith(ENTRY) and kind == "entries":
        counts["entries"] += 1
      if name.endswith(MARKER):
        counts["complete_splits"] += 1
        about = _derived(os.path.join(dirpath, name[:-len(MARKER)]))
        if about:
          derived.append(about)
  return {"root": store.root, **{k: counts[k] for k in
                                 ("entries", "entries_bytes", "complete_splits", "splits_bytes")},
          "derived_splits": sorted(derived, key=lambda d: d["split"])}


def _marker(base: str) -> Optional[dict]:
  """A split's marker as JSON, or None where it cannot be read (its check says why)."""
  try:
    with open(marker_path(base), "rb") as f:
      marker = json.loads(f.read())
  except (OSError, ValueError):
    return None
  return marker if isinstance(marker, dict) else None


def _derived(base: str) -> Optional[dict]:
  """What a split made from another says of itself (its marker's "kind" and "source"), or None."""
  marker = _marker(base) or {}
  if "source" not in marker:
    return None
  data = cache_format.data_path(base)
  return {"split": os.path.basename(base), "kind": marker.get("kind"),
          "source": marker["source"], "rows": marker.get("count"),
          "bytes": os.path.getsize(data) if os.path.exists(data) else 0,
          **marker.get("about", {})}


def verify(cache_dir: Optional[str]) -> dict:
  """Checks every byte of every complete split and every entry under `cache_dir`.

  A damaged split loses its marker and a damaged entry its file: the next
  run fills them again. A folder that another format version wrote (its
  markers say so) is left as it is: this audioclf never reads it, and
  `prune` removes it once unused.

  Returns:
    {"splits": n, "damaged": [split base, ...], "entries": n,
     "damaged_entries": [entry path, ...], "other_formats": [folder, ...], "bytes": n,
     "seconds": s}.
  """
  root = cache_dir or keys_lib.default_cache_dir()
  report = {"splits": 0, "damaged": [], "entries": 0, "damaged_entries": [],
            "other_formats": [], "bytes": 0}
  fingerprints = keys_lib.Fingerprints()
  start = time.perf_counter()
  for folder in (os.scandir(root) if os.path.isdir(root) else ()):
    if not folder.is_dir():
      continue
    splits = os.path.join(folder.path, "splits")
    if _format_of(splits) not in (None, FORMAT):
      report["other_formats"].append(folder.path)
      continue
    _verify_splits(splits, report, fingerprints)
    _verify_entries(os.path.join(folder.path, "entries"), report)
  report["seconds"] = round(time.perf_counter() - start, 3)
  return report


def _format_of(splits: str) -> Optional[int]:
  """The format version a decode folder's markers give (one per folder: it is in the key)."""
  for name in sorted(os.listdir(splits)) if os.path.isdir(splits) else ():
    if name.endswith(MARKER):
      try:
        with open(os.path.join(splits, name), "rb") as f:
          marker = json.loads(f.read())
      except (OSError, ValueError):
        continue  # Damaged: the check of its split says so.
      if isinstance(marker, dict) and marker.get("schema") == SCHEMA:
        return marker.get("format")
  return None


def _verify_splits(splits: str, report: dict, fingerprints: keys_lib.Fingerprints) -> None:
  for name in sorted(os.listdir(splits)) if os.path.isdir(splits) else ():
    if not name.endswith(MARKER):
      continue
    base = os.path.join(splits, name[:-len(MARKER)])
    report["splits"] += 1
    try:
      with open(marker_path(base), "rb") as f:
        split = check_files(base, f.read(), None)  # Marker, sizes, index and keys.
      bad = split.damaged_rows()
      if bad:
        raise DamagedSplitError(f"{len(bad)} clips fail their checksums (rows {bad[:5]})")
      fingerprints.remember_checked(split.data_path)
      report["bytes"] += split.samples * np.dtype(split.dtype).itemsize
    except (DamagedSplitError, OSError) as e:
      report["damaged"].append(base)
      cache_format.report_damaged(base, str(e))


def _verify_entries(entries: str, report: dict) -> None:
  for dirpath, _, names in os.walk(entries):
    for name in sorted(names):
      if not name.endswith(ENTRY):
        continue  # A writer's temporary file: not trusted by anyone yet.
      path = os.path.join(dirpath, name)
      try:
        raw = np.fromfile(path, np.uint8)
      except FileNotFoundError:
        continue  # Its split was written meanwhile, which dropped it.
      except OSError as e:
        raw, reason = None, f"it cannot be read ({e.strerror})"
      else:
        reason = "it fails its checksum"
      report["entries"] += 1
      if raw is not None and cache_format.entry_samples(name[:-len(ENTRY)], raw) is not None:
        report["bytes"] += raw.size
        continue
      report["damaged_entries"].append(path)
      logging.warning("audioclf: the cached entry %s is damaged (%s): it is removed, and its "
                      "file will be decoded again", path, reason)
      try:
        files.remove(path)
      except OSError:
        pass  # A read-only cache: reported, and every reader checks it anyway.


def prune(cache_dir: Optional[str], days: float) -> dict:
  """Deletes what no run has used for `days` days, under every decode folder of `cache_dir`.

  A split goes when its marker was last read (every input_fn call that finds
  it touches it) before the cut-off: marker first, so no reader trusts a
  half-deleted split, then its data and index. Entries go when last read or
  written before it; so do a killed fill's leftovers (split files with no
  marker, temporary files). What a running fill writes is newer than any
  cut-off, and a process that has a split memory-mapped keeps reading it.

  Returns:
    {"removed_files": n, "freed_bytes": n, "kept_splits": n}.
  """
  if days < 0:
    raise ValueError(f"prune days must be >= 0, got {days}")
  pruner = _Pruner(cutoff=time.time() - days * 86400)
  root = cache_dir or keys_lib.default_cache_dir()
  for folder in (os.scandir(root) if os.path.isdir(root) else ()):
    if folder.is_dir():
      pruner.splits(os.path.join(folder.path, "splits"))
      pruner.entries(os.path.join(folder.path, "entries"))
  return {k: pruner.report[k] for k in ("removed_files", "freed_bytes", "kept_splits")}


class _Pruner:
  """Removes the cache files of one decode folder last used before `cutoff`, counting them."""

  def __init__(self, cutoff: float):
    self.cutoff = cutoff
    self.report = collections.Counter()

  def splits(self, splits_dir: str) -> None:
    """Each split whose marker is unused goes, marker first; files with no marker go when unused.

    A split derived from another (its marker names a "source") goes with it:
    when the source's marker is gone, or goes now, so does the derived split.
    """
    files = collections.defaultdict(list)  # Split key -> its files.
    for f in (os.scandir(splits_dir) if os.path.isdir(splits_dir) else ()):
      files[f.name.split(".")[0]].append(f.path)
    sources = {key: (_marker(os.path.join(splits_dir, key)) or {}).get("source")
               for key, paths in files.items()
               if marker_path(os.path.join(splits_dir, key)) in paths}
    kept = set()
    for key in sorted(files, key=lambda k: sources.get(k) is not None):  # Sources first.
      marker = marker_path(os.path.join(splits_dir, key))
      paths, orphan = files[key], False
      if marker in paths:
        orphan = sources.get(key) is not None and sources[key] not in kept
        if not orphan and not self._unused(marker):
          kept.add(key)
          self.report["kept_splits"] += 1
          continue
        paths = [marker] + sorted(set(paths) - {marker})
      for path in paths:
        if path == marker or orphan or self._unused(path):
          self._remove(path)

  def entries(self, entries_dir: str) -> None:
    for dirpath, _, names in os.walk(entries_dir):
      for name in names:
        path = os.path.join(dirpath, name)
        if self._unused(path):
          self._remove(path)

  def _remove(self, path: str) -> None:
    try:
      size = os.path.getsize(path)
      os.remove(path)
    except FileNotFoundError:
      return  # Another process pruned it first.
    self.report["removed_files"] += 1
    self.report["freed_bytes"] += size

  def _unused(self, path: str) -> bool:
    try:
      return os.path.getmtime(path) < self.cutoff
    except FileNotFoundError:
      return False  # Gone already.
