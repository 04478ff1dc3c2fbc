"""Which audio files exist, their labels and splits: a folder per label or a CSV manifest."""

from __future__ import annotations

import collections
import csv
import dataclasses
import functools
import hashlib
import io
import math
import os
import re
import stat
from typing import Iterable, Iterator, Optional, Sequence

from absl import logging

from audioclf.params import SPLITS, Params

# Extensions libsndfile reads that a folder scan picks up; other files (README, .txt) are ignored.
AUDIO_EXTENSIONS = frozenset(
    ".wav .wave .flac .ogg .oga .opus .aif .aiff .aifc .au .snd .caf .w64 .rf64 .mp3".split())
# Speech Commands assigns at most this many files per speaker hash bucket; we reuse its formula
# so a folder from the real dataset splits exactly as its authors split it.
_MAX_NUM_WAVS_PER_CLASS = 2**27 - 1
_NOHASH = re.compile(r"_nohash_.*$")
# Speech Commands' names: the classes --wanted_words adds, and the folder of long
# recordings that training mixes in (never a label).
SILENCE = "_silence_"
UNKNOWN = "_unknown_"
NOISE_FOLDER = "_background_noise_"
SPEAKER = "speaker"  # The group (manifest.groups) of the name before `_nohash_`.
CSV_COLUMNS = ("path", "label", "split")  # A CSV manifest's columns, in order where unnamed.


class DataError(ValueError):
  """The data source is unusable: missing, empty, unlabeled, or malformed."""


@dataclasses.dataclass(frozen=True)
class Example:
  path: str  # Absolute.
  label: str
  split: str
  size: int
  mtime_ns: int
  # With size and mtime, these say whether the file may have changed since its
  # content was last fingerprinted (audioclf.data.keys): ctime moves on every
  # write, even one that puts the mtime back.
  ctime_ns: int = 0
  inode: int = 0
  device: int = 0

  @property
  def virtual(self) -> bool:
    """A _silence_ clip: no file, its samples are zeros (plus noise, as the pipeline mixes it)."""
    return not self.path


@dataclasses.dataclass(frozen=True)
class Manifest:
  labels: tuple[str, ...]  # Sorted vocabulary; a label's id is its index.
  examples: tuple[Example, ...]  # Each split's files, then its _silence_ clips.
  root: str  # Folder the data lives in (data_dir, or the CSV's folder).
  noise: tuple[Example, ...] = ()  # Background recordings to mix in (label "", split "train").
  rirs: tuple[Example, ...] = ()  # Room impulse responses of --rir_dir (label "", split "train").

  def split(self, name: str) -> list[Example]:
    """The split's examples in input_fn's order: its files, then its virtual _silence_ clips."""
    if name not in SPLITS:
      raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
    return [e for e in self.examples if e.split == name]

  def files(self, name: str) -> list[Example]:
    """The split's examples that are files (what the cache holds), in order."""
    return [e for e in self.split(name) if not e.virtual]

  def label_id(self, label: str) -> int:
    return self.labels.index(label)

  def counts(self) -> dict[str, int]:
    return {s: sum(e.split == s for e in self.examples) for s in SPLITS}

  def label_counts(self, split: str) -> list[int]:
    """How many examples of `split` each label has, by label id."""
    counts = collections.Counter(e.label for e in self.split(split))
    return [counts[label] for label in self.labels]


def which_split(path: str, validation_percent: float, testing_percent: float) -> str:
  """Speech Commands' split rule: a stable hash of the speaker part of the name.

  Everything before `_nohash_` names the speaker, so all of a speaker's clips
  land in the same split and a model is never tested on a voice it trained on.
  """
  percent = _speaker_percent(speaker_of(path))
  if percent < validation_percent:
    return "validation"
  if percent < validation_percent + testing_percent:
    return "test"
  return "train"


def speaker_of(path: str) -> str:
  """The speaker of a Speech Commands file: its name before `_nohash_` (the whole name without)."""
  return _NOHASH.sub("", os.path.basename(path))


def groups(params: Params, examples: Sequence[Example], by: str) -> list[str]:
  """Each example's group, for accuracy per group: a CSV manifest's column, or the speaker.

  A column of the CSV manifest named `by` gives each file's value; else "speaker"
  gives the name before `_nohash_` (speaker_of). A _silence_ clip, which has
  no file, is in the group "_silence_".

  Raises:
    DataError: `by` is neither, naming what there is.
  """
  column = _csv_column(params.manifest, by) if params.manifest else None
  if column is None and by != SPEAKER:
    extra = _csv_extra_columns(params.manifest) if params.manifest else []
    raise DataError(f"--group_by={by}: no such column in {params.manifest or params.data_dir}; "
                    f"group by {', '.join(dict.fromkeys([SPEAKER, *extra]))}")
  return [e.label if e.virtual else column[e.path] if column is not None else speaker_of(e.path)
          for e in examples]


@functools.lru_cache(maxsize=1 << 17)  # Speech Commands' 105,829 files; reloading skips the SHA-1s.
def _speaker_percent(speaker: str) -> float:
  digest = hashlib.sha1(speaker.encode("utf-8")).hexdigest()
  return (int(digest, 16) % (_MAX_NUM_WAVS_PER_CLASS + 1)) * (100.0 / _MAX_NUM_WAVS_PER_CLASS)


def load(params: Params) -> Manifest:
  """Builds the manifest that `params` describes (exactly one of data_dir / manifest).

  Raises:
    DataError: no source, a missing folder or file, no labels, a single class,
      or a malformed CSV row.
  """
  if bool(params.data_dir) == bool(params.manifest):
    raise DataError("set exactly one of data_dir (a folder per label) or manifest (a CSV file)")
  if params.manifest:
    manifest = _from_csv(params)
  else:
    manifest = _from_folders(params)
  if params.extra_train_dir:
    manifest = _extra_train(manifest, params)
  manifest = _classes(manifest, params)
  manifest = dataclasses.replace(manifest, noise=tuple(_noise(manifest.root, params)),
                                 rirs=tuple(_recordings(params.rir_dir, "rir_dir", params)))
  if not manifest.examples:
    raise DataError(f"no audio files found in {params.manifest or params.data_dir}")
  if len(manifest.labels) < 2:
    raise DataError(
        f"{params.manifest or params.data_dir} has a single class {list(manifest.labels)}: "
        "a classifier needs at least two labels")
  return manifest


def _classes(manifest: Manifest, params: Params) -> Manifest:
  """Applies --wanted_words, --unknown_percent and --silence_percent, as Speech Commands' recipe.

  Each split keeps its wanted-word clips; of the others, ceil(unknown_percent %
  of them) become _unknown_ clips, chosen by a stable hash of their path
  relative to the data (so a copied dataset, another host or another run
  chooses the same ones), the rest are left out; then ceil(silence_percent %)
  virtual _silence_ clips are appended. Both classes are labels whenever their
  percentage is set, so the class list is what the flags say.

  Raises:
    DataError: a wanted word is no label of the data.
  """
  wanted = set(params.wanted_words) or set(manifest.labels)
  missing = sorted(wanted - set(manifest.labels))
  if missing:
    raise DataError(f"--wanted_words {', '.join(missing)} not among the labels of "
                    f"{params.manifest or params.data_dir}: {', '.join(manifest.labels)}")
  if not params.wanted_words and not params.silence_percent:
    return manifest
  examples, labels = [], set(wanted)
  if params.unknown_percent:
    labels.add(UNKNOWN)
  if params.silence_percent:
    labels.add(SILENCE)
  for split in SPLITS:
    kept = [e for e in manifest.examples if e.split == split and e.label in wanted]
    others = sorted((e for e in manifest.examples if e.split == split and e.label not in wanted),
                    key=lambda e: _stable_hash(os.path.relpath(e.path, manifest.root)))
    unknown = others[:math.ceil(len(kept) * params.unknown_percent / 100)]
    chosen = {e.path for e in unknown}
    # In the order they were found, as every other clip.
    examples += [e if e.label in wanted else dataclasses.replace(e, label=UNKNOWN)
                 for e in manifest.examples if e.split == split and (
                     e.label in wanted or e.path in chosen)]
    examples += [Example("", SILENCE, split, 0, 0)
                 for _ in range(math.ceil(len(kept) * params.silence_percent / 100))]
  return Manifest(tuple(sorted(labels)), tuple(examples), manifest.root)


def _stable_hash(text: str) -> str:
  return hashlib.sha1(text.replace(os.sep, "/").encode("utf-8")).hexdigest()


def _noise(root: str, params: Params) -> list[Example]:
  """The background recordings: --noise_dir, else <root>/_background_noise_ where it holds audio.

  Raises:
    DataError: --noise_dir is no folder or holds no audio file; a missing
      listed file under on_bad_file="fail".
  """
  if params.noise_dir:
    return _recordings(params.noise_dir, "noise_dir", params)
  folder = os.path.join(root, NOISE_FOLDER)
  return _recordings(folder, "", params) if os.path.isdir(folder) else []


def _recordings(folder: Optional[str], flag: str, params: Params) -> list[Example]:
  """The audio files under `folder` (a --`flag` the user gave, or "" for a default), sorted.

  Raises:
    DataError: the flag's folder is no folder or holds no audio file; a
      missing listed file under on_bad_file="fail".
  """
  if not folder:
    return []
  if not os.path.isdir(folder):
    raise DataError(f"{flag} {folder!r} does not exist or is not a folder")
  rows = []
  for dirpath, dirnames, filenames in os.walk(os.path.abspath(folder)):
    dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    rows += [(os.path.join(dirpath, name), "", "train", "") for name in sorted(filenames)
             if os.path.splitext(name)[1].lower() in AUDIO_EXTENSIONS]
  if not rows and flag:
    raise DataError(f"{flag} {folder!r} holds no audio files")
  return _stat_examples(rows, params)


def _stat_examples(rows: Iterable[tuple[str, str, Optional[str], str]], params: Params,
                   ) -> list[Example]:
  """Turns (path, label, split-or-None, where) rows into Examples, applying the bad-file policy.

  `where` says where a row came from ("<csv>:<line>: ", or "" for a folder
  scan), to lead the error about a file that is missing.
  """
  examples, missing, seen = [], [], set()
  for path, label, split, where in rows:
    if path in seen:
      continue  # A file listed twice would be trained on twice and cached once.
    seen.add(path)
    try:
      st = os.stat(path)
      problem = None if stat.S_ISREG(st.st_mode) else "not a file"
    except OSError as e:
      problem = e.strerror
    except ValueError as e:  # A NUL byte in the path.
      problem = str(e)
    if problem:
      if params.on_bad_file == "fail":
        raise DataError(f"{where}cannot read audio file {path!r}: {problem}")
      missing.append(path)
      continue
    split = split or which_split(path, params.validation_percent, params.testing_percent)
    examples.append(Example(path, label, split, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                            st.st_ino, st.st_dev))
  if missing:
    for path in missing:
      logging.warning("audioclf: skipping missing file %s", path)
    logging.warning("audioclf: skipped %d missing files", len(missing))
  return examples


def _read_text(path: str) -> str:
  """A UTF-8 text file's contents (a byte order mark is dropped).

  Raises:
    DataError: the file is not UTF-8, naming it and the line.
  """
  with open(path, "rb") as f:
    data = f.read()
  try:
    return data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise DataError(f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x}); "
                    "save it as UTF-8") from None


def _read_list(path: str) -> set[str]:
  if not os.path.exists(path):
    return set()
  return {line.strip() for line in _read_text(path).splitlines() if line.strip()}


def _from_folders(params: Params) -> Manifest:
  root = os.path.abspath(params.data_dir)
  if not os.path.isdir(root):
    raise DataError(f"data_dir {params.data_dir!r} does not exist or is not a folder")
  validation = _read_list(os.path.join(root, "validation_list.txt"))
  testing = _read_list(os.path.join(root, "testing_list.txt"))
  has_lists = bool(validation or testing)

  rows = []
  for path, label in _labelled_files(root):
    split = None
    if has_lists:  # The lists name files relative to root, with "/".
      rel = path[len(root) + 1:].replace(os.sep, "/")
      split = "validation" if rel in validation else "test" if rel in testing else "train"
    rows.append((path, label, split, ""))
  examples = _stat_examples(rows, params)
  used = tuple(sorted({e.label for e in examples}))
  if not used:
    raise DataError(f"data_dir {root!r} holds no label folders with audio files "
                    "(expected <data_dir>/<label>/<file>.wav)")
  return Manifest(used, tuple(examples), root)


def _labelled_files(root: str) -> Iterator[tuple[str, str]]:
  """(path, label) of each audio file under a folder per label, in a stable order.

  Folders starting with "_" (Speech Commands' _background_noise_) or "." hold
  no labels, but _unknown_: other words (audioclf synthesize --unknown_words).
  """
  labels = sorted(d.name for d in os.scandir(root) if d.is_dir() and (
      d.name == UNKNOWN or not d.name.startswith(("_", "."))))
  for label in labels:
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, label)):
      dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
      for name in sorted(filenames):
        if os.path.splitext(name)[1].lower() in AUDIO_EXTENSIONS:
          yield os.path.join(dirpath, name), label


def _extra_train(manifest: Manifest, params: Params) -> Manifest:
  """The manifest plus --extra_train_dir's files, all in the train split.

  Raises:
    DataError: the folder is missing or holds no labelled audio, or a label
      the data does not have.
  """
  root = params.extra_train_dir
  if not os.path.isdir(root):
    raise DataError(f"extra_train_dir {root!r} does not exist or is not a folder")
  rows = [(path, label, "train", "") for path, label in _labelled_files(os.path.abspath(root))]
  if not rows:
    raise DataError(f"extra_train_dir {root!r} holds no label folders with audio files "
                    "(expected <extra_train_dir>/<label>/<file>.wav)")
  unknown = sorted({label for _, label, _, _ in rows} - set(manifest.labels))
  if unknown:
    raise DataError(f"extra_train_dir {root!r} has labels the data does not: "
                    f"{', '.join(unknown)} (the data has {', '.join(manifest.labels)})")
  return dataclasses.replace(
      manifest, examples=manifest.examples + tuple(_stat_examples(rows, params)))


def _from_csv(params: Params) -> Manifest:
  path = os.path.abspath(params.manifest)
  if not os.path.isfile(path):
    raise DataError(f"manifest {params.manifest!r} does not exist or is not a file")
  rows = []
  for where, file, record in _csv_records(path):
    split = record.get("split") or None
    if split is not None and split not in SPLITS:
      raise DataError(f"{where}split must be one of {SPLITS}, got {split!r}")
    rows.append((file, record["label"], split, where))
  examples = _stat_examples(rows, params)
  labels = tuple(sorted({e.label for e in examples}))
  return Manifest(labels, tuple(examples), os.path.dirname(path))


def _csv_records(path: str) -> Iterator[tuple[str, str, dict[str, str]]]:
  """(where, file, {column: value}) per row of a CSV manifest; where is "<csv>:<line>: ".

  Rows are path,label[,split], or, under a header naming other columns too
  (path,label,speaker,...: a speaker, a microphone, a session), one value
  per column of the header, the extra ones for --group_by. A file's path is
  relative to the CSV.

  Raises:
    DataError: a row that does not fit, naming its line.
  """
  root = os.path.dirname(path)
  reader = csv.reader(io.StringIO(_read_text(path), newline=""))
  names = None  # The header's columns, where it names more than CSV_COLUMNS.
  try:
    for row in reader:
      row = [c.strip() for c in row]
      where = f"{path}:{reader.line_num}: "  # The line a row ends on, as a quoted field may span lines.
      if not row or not any(row) or row[0].startswith("#"):
        continue
      if reader.line_num == 1 and row[0].lower() == "path":
        names = _header(row, where)
        continue
      if names is not None:
        if len(row) != len(names):
          raise DataError(f"{where}expected the header's {len(names)} columns "
                          f"({','.join(names)}), got {row}")
        record = dict(zip(names, row))
      elif len(row) in (2, 3):
        record = dict(zip(CSV_COLUMNS, row))
      else:
        raise DataError(f"{where}expected 'path,label[,split]', got {row}")
      if not record["path"] or not record["label"]:
        raise DataError(f"{where}expected 'path,label[,split]', got {row}")
      yield where, os.path.normpath(os.path.join(root, record["path"])), record
  except csv.Error as e:  # A field over csv's size limit.
    raise DataError(f"{path}:{reader.line_num}: not a CSV row: {e}") from None


def _header(row: list[str], where: str) -> Optional[list[str]]:
  """The columns a CSV header names, or None where it names only path,label[,split] (positional).

  Raises:
    DataError: a header of other columns without label, or naming one twice.
  """
  names = [c.lower() for c in row]
  if names == list(CSV_COLUMNS[:len(names)]):
    return None
  if "label" not in names or len(set(names)) != len(names) or not all(names):
    raise DataError(f"{where}a header must name path, label, optionally split, and other columns "
                    f"once each, got {row}")
  return names


def _csv_column(path: str, name: str) -> Optional[dict[str, str]]:
  """File -> its value in the CSV manifest's column `name`; None where it has no such column."""
  if name.lower() not in _csv_extra_columns(path):
    return None
  return {file: record[name.lower()] for _, file, record in _csv_records(os.path.abspath(path))}


def _csv_extra_columns(path: str) -> list[str]:
  """The columns a CSV manifest's header names beyond path, label and split."""
  for _, _, record in _csv_records(os.path.abspath(path)):
    return [c for c in record if c not in CSV_COLUMNS]
  return []
