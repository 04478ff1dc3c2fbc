"""The frozen parameters every part of audioclf reads, and the one check of every value."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import operator
import re
import typing
from typing import Any, Iterator, Optional

MODES = ("train", "eval", "infer")  # The strings of tf.estimator.ModeKeys.
SPLITS = ("train", "validation", "test")
BAD_FILE_POLICIES = ("fail", "skip")
RESAMPLE_QUALITIES = ("QQ", "LQ", "MQ", "HQ", "VHQ")  # soxr's recipes.
LR_SCHEDULES = ("constant", "cosine")
# The names of registries that live next to TensorFlow code (models.MODELS,
# models' optimizers, engines.ENGINES, tune's tuners), spelled here so that
# a typo fails in Params.validate without importing TensorFlow; a test keeps
# each registry and its names equal.
MODEL_NAMES = ("cnn", "ds_cnn")
OPTIMIZER_NAMES = ("adam", "sgd", "rmsprop")
ENGINE_NAMES = ("keras", "estimator")
STRATEGIES = ("auto", "mirrored")
DATA_SERVICE_ADDRESS = re.compile(r"^grpc://[^:/\s]+:\d+$")
TUNER_NAMES = ("random", "hyperband", "bayesian")
MAX_CLIP_SECONDS = 600


class ParamError(ValueError):
  """A parameter value that cannot work; the message starts with its flag, `--name=value`."""


@dataclasses.dataclass(frozen=True)
class Params:
  """Everything a run needs; built from absl flags or directly in Python.

  Library code takes a `Params`, never absl's FLAGS, so audioclf imports
  cleanly in notebooks, tests and the tuner. Use `dataclasses.replace` (or
  `params.replace(...)`) to derive variants.
  """

  # --- Data source: a folder per label (Speech Commands layout) or a CSV manifest.
  data_dir: Optional[str] = None
  manifest: Optional[str] = None
  validation_percent: float = 10.0  # Used only where no list/CSV split says otherwise.
  testing_percent: float = 10.0
  # The classes (Speech Commands' 12-class task): with wanted_words, the other
  # labels' clips become _unknown_, sampled to unknown_percent of each split's
  # wanted-word clips, and silence_percent adds _silence_ clips (zeros plus
  # background noise). Empty: every label is a class, as found.
  wanted_words: tuple[str, ...] = ()
  unknown_percent: float = 0.0
  silence_percent: float = 0.0

  # --- Decoding and the persistent cache.
  sample_rate: int = 16000
  clip_seconds: float = 1.0
  cache_dir: Optional[str] = None  # None: $AUDIOCLF_CACHE_DIR, else ~/.cache/audioclf.
  on_bad_file: str = "fail"  # "fail" | "skip"
  resample_quality: str = "HQ"  # soxr quality: "QQ", "LQ", "MQ", "HQ", "VHQ".

  # --- Pipeline.
  batch_size: int = 64
  shuffle_seed: Optional[int] = 0  # None: a different file order every run.
  time_shift_seconds: float = 0.1  # Train only: random shift of the clip window.
  # Train only: the chance to mix noise into an example: an excerpt of a
  # background recording (noise_dir, else <data_dir>/_background_noise_), or
  # white noise where there is none.
  noise_prob: float = 0.0
  noise_snr_db: tuple[float, ...] = (20.0, 20.0)  # min,max of its uniform level; "20" is 20,20.
  noise_dir: Optional[str] = None

  # --- Features (computed inside the model, so every path takes raw audio).
  n_mels: int = 40
  frame_ms: float = 30.0
  stride_ms: float = 10.0
  fmin: float = 20.0
  fmax: float = 7600.0
  spec_augment: bool = True

  # --- Model.
  model: str = "cnn"
  width: int = 64
  dropout: float = 0.2

  # --- Training.
  engine: str = "keras"  # "keras" | "estimator"
  model_dir: Optional[str] = None
  train_steps: int = 1000
  eval_every_steps: int = 0  # 0: once, at the end (Keras: per epoch of this size).
  learning_rate: float = 1e-3
  lr_schedule: str = "constant"  # "constant" | "cosine" (decays to 0 at train_steps)
  optimizer: str = "adam"
  seed: int = 0
  log_every_steps: int = 50
  # Where training batches are copied while the step before them runs:
  # "auto" (the first GPU when TensorFlow sees one, else nowhere), "none", or a device name.
  prefetch_device: str = "auto"
  # Keras engine: "auto" (MultiWorkerMirroredStrategy when TF_CONFIG names
  # several workers, else one device) or "mirrored" (every GPU of this host,
  # or its logical CPUs).
  strategy: str = "auto"
  # grpc://host:port of a tf.data service dispatcher (python -m audioclf service):
  # training batches come from its workers. None: from this host's pipeline.
  data_service: Optional[str] = None

  # --- Hyperparameter search (python -m audioclf tune).
  tuner: str = "random"  # "random" | "hyperband" | "bayesian"
  max_trials: int = 10
  tune_dir: Optional[str] = None  # keras-tuner project; None: <model_dir>/tune.
  trial_steps: int = 200  # Training steps per trial (Hyperband: the largest budget).
  trial_epochs: int = 4  # A trial is this many epochs of trial_steps/trial_epochs (Hyperband: max_epochs).

  def __post_init__(self):
    # Flags, JSON and callers give lists as lists, comma strings or (a range) one number.
    for name, item in _ITEMS.items():
      object.__setattr__(self, name, _as_tuple(getattr(self, name), item, name in _RANGES))

  def replace(self, **changes: Any) -> "Params":
    return dataclasses.replace(self, **changes)

  @property
  def clip_samples(self) -> int:
    return int(round(self.clip_seconds * self.sample_rate))

  def validate(self) -> "Params":
    """Checks every field against RULES, then the limits that join fields.

    Returns:
      self, for chaining.

    Raises:
      ParamError: the first value that cannot work, as "--name=value: must be
        <the allowed range or choices>".
    """
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      problem = RULES[field.name].problem(value, _TYPES[field.name], _ITEMS.get(field.name))
      if problem:
        raise ParamError(f"--{field.name}={flag_value(value)}: {problem}")
    problem = next(_joint_problems(self), None)
    if problem:
      raise ParamError(problem)
    return self

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True)

  @classmethod
  def from_dict(cls, values: dict[str, Any]) -> "Params":
    """Builds Params from a dict, ignoring keys this version does not know."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})

  @classmethod
  def from_json(cls, path: str) -> "Params":
    with open(path) as f:
      return cls.from_dict(json.load(f))


@dataclasses.dataclass(frozen=True)
class Rule:
  """What one field accepts besides its type: bounds (inclusive ge/le, exclusive gt/lt) or choices."""

  ge: Optional[float] = None
  gt: Optional[float] = None
  le: Optional[float] = None
  lt: Optional[float] = None
  choices: tuple[str, ...] = ()
  size: Optional[int] = None  # A list field: how many values it holds.
  why: str = ""  # Said after the range, where the limit is not obvious.

  def describe(self) -> str:
    """The allowed values in words, e.g. "> 0 and <= 600" or "one of fail, skip"."""
    if self.choices:
      return "one of " + ", ".join(self.choices)
    parts = [f"{op} {bound}" for op, bound in ((">=", self.ge), (">", self.gt), ("<=", self.le),
                                                 ("<", self.lt)) if bound is not None]
    return " and ".join(parts)

  def problem(self, value: Any, kind: tuple[type, bool], item: Optional[type] = None,
              ) -> Optional[str]:
    """Why `value` is not allowed ("must be ..."), or None where it is.

    A list field (`kind` (tuple, ...)) has each of its values checked as one
    of type `item`.
    """
    base, optional = kind
    if value is None:
      return None if optional else f"must be set ({_TYPE_NAMES[base]})"
    if base is tuple:
      if not isinstance(value, tuple):
        return f"must be a comma-separated list, not {type(value).__name__}"
      if self.size is not None and len(value) != self.size:
        return f"must be {self.size} values" + (f" ({self.why})" if self.why else "")
      return next((p for p in (self.problem(v, (item, False)) for v in value) if p), None)
    if not _is_a(value, base):
      return f"must be {_TYPE_NAMES[base]}, not {type(value).__name__}"
    if self.choices and value not in self.choices:
      return f"must be {self.describe()}"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
      if not math.isfinite(value):
        return "must be a finite number"
      if not all(bound is None or holds(value, bound) for bound, holds in (
          (self.ge, operator.ge), (self.gt, operator.gt), (self.le, operator.le),
          (self.lt, operator.lt))):
        return f"must be {self.describe()}" + (f" ({self.why})" if self.why else "")
    return None


_SEED = Rule(ge=0, le=2**32 - 1, why="numpy's seed range")
_ANY = Rule()

# Every field of Params, and what it accepts. A field without a limit still
# gets its type checked; a test fails if a field is missing here.
RULES: dict[str, Rule] = {
    "data_dir": _ANY,
    "manifest": _ANY,
    "validation_percent": Rule(ge=0, le=100),
    "testing_percent": Rule(ge=0, le=100),
    "wanted_words": _ANY,  # Names are checked in _joint_problems.
    "unknown_percent": Rule(ge=0, le=100, why="of each split's wanted-word clips"),
    "silence_percent": Rule(ge=0, le=100, why="of each split's wanted-word clips"),
    "sample_rate": Rule(gt=0, le=768_000),
    "clip_seconds": Rule(gt=0, le=MAX_CLIP_SECONDS,
                         why="a clip is one example, decoded, cached and batched whole: 600 s at "
                             "16 kHz is already 38 MB per example"),
    "cache_dir": _ANY,
    "on_bad_file": Rule(choices=BAD_FILE_POLICIES),
    "resample_quality": Rule(choices=RESAMPLE_QUALITIES),
    "batch_size": Rule(ge=1),
    "shuffle_seed": _SEED,
    "time_shift_seconds": Rule(ge=0),
    "noise_prob": Rule(ge=0, le=1),
    "noise_snr_db": Rule(size=2, why="one level in dB, or min,max"),
    "noise_dir": _ANY,
    "n_mels": Rule(ge=1),
    "frame_ms": Rule(gt=0),
    "stride_ms": Rule(gt=0),
    "fmin": Rule(ge=0),
    "fmax": Rule(gt=0),
    "spec_augment": _ANY,
    "model": Rule(choices=MODEL_NAMES),
    "width": Rule(ge=1),
    "dropout": Rule(ge=0, lt=1),
    "engine": Rule(choices=ENGINE_NAMES),
    "model_dir": _ANY,
    "train_steps": Rule(ge=1),
    "eval_every_steps": Rule(ge=0, why="0 evaluates once, at the end"),
    "learning_rate": Rule(gt=0),
    "lr_schedule": Rule(choices=LR_SCHEDULES),
    "optimizer": Rule(choices=OPTIMIZER_NAMES),
    "seed": _SEED,
    "log_every_steps": Rule(ge=0, why="0 logs once per evaluation"),
    "prefetch_device": _ANY,  # Its form is checked in _joint_problems.
    "strategy": Rule(choices=STRATEGIES),
    "data_service": _ANY,  # Its form is checked in _joint_problems.
    "tuner": Rule(choices=TUNER_NAMES),
    "max_trials": Rule(ge=1),
    "tune_dir": _ANY,
    "trial_steps": Rule(ge=1),
    "trial_epochs": Rule(ge=1),
}

_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               tuple: "a comma-separated list"}


def _is_a(value: Any, base: type) -> bool:
  if base is bool:
    return isinstance(value, bool)
  if base is int:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
  if base is float:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
  return isinstance(value, base)


def field_types() -> dict[str, tuple[type, bool]]:
  """Each field's base type and whether it may be None: (int, True) for Optional[int]."""
  types = {}
  for name, hint in typing.get_type_hints(Params).items():
    if typing.get_origin(hint) is tuple:
      types[name] = (tuple, False)
      continue
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    types[name] = (args[0] if args else hint, type(None) in typing.get_args(hint))
  return types


def item_types() -> dict[str, type]:
  """The list fields and the type of their values: {"wanted_words": str, ...}."""
  return {name: typing.get_args(hint)[0] for name, hint in typing.get_type_hints(Params).items()
          if typing.get_origin(hint) is tuple}


_TYPES = field_types()
_ITEMS = item_types()
_RANGES = {"noise_snr_db"}  # min,max: a single value v means v,v.


def _as_tuple(value: Any, item: type, is_range: bool) -> Any:
  """`value` as a tuple of `item`s where it reads as one; else as it was, for validate to refuse."""
  if isinstance(value, str):
    value = [v.strip() for v in value.split(",") if v.strip()]
  elif isinstance(value, numbers.Real) and not isinstance(value, bool):
    value = [value]
  if not isinstance(value, (list, tuple)):
    return value
  if item is float:
    def number(v):
      try:
        return float(v) if isinstance(v, (str, numbers.Real)) and not isinstance(v, bool) else v
      except ValueError:
        return v
    value = [number(v) for v in value]
  if is_range and len(value) == 1:
    value = value * 2
  return tuple(value)


def flag_value(value: Any) -> str:
  """`value` as a flag spells it: lists comma-separated."""
  if isinstance(value, tuple):
    return ",".join(str(v) for v in value)
  return str(value)


def _joint_problems(p: Params) -> Iterator[str]:
  """The limits that join fields, each message led by the flag to change."""
  low, high = p.noise_snr_db
  if low > high:
    yield f"--noise_snr_db={flag_value(p.noise_snr_db)}: must be min,max with min <= max"
  words = flag_value(p.wanted_words)
  if len(set(p.wanted_words)) != len(p.wanted_words):
    yield f"--wanted_words={words}: must not repeat a word"
  for word in p.wanted_words:
    if word.startswith("_") or "/" in word:
      yield (f"--wanted_words={words}: {word!r} cannot be a wanted word (names starting with _ "
             "are _unknown_, _silence_ and folders that hold no label)")
  if p.unknown_percent and not p.wanted_words:
    yield (f"--unknown_percent={p.unknown_percent}: needs --wanted_words (the labels outside "
           "them are the unknown ones)")
  if p.validation_percent + p.testing_percent >= 100:
    yield (f"--validation_percent={p.validation_percent} + --testing_percent={p.testing_percent}: "
           "must be < 100, or no file is left to train on")
  nyquist = p.sample_rate / 2
  if p.fmax > nyquist:
    yield (f"--fmax={p.fmax}: must be <= sample_rate/2 = {nyquist:g} Hz, the highest frequency "
           f"--sample_rate={p.sample_rate} holds")
  if p.fmin >= p.fmax:
    yield f"--fmin={p.fmin}: must be < --fmax={p.fmax}"
  sample_ms = 1000.0 / p.sample_rate
  for name in ("frame_ms", "stride_ms"):
    if int(round(p.sample_rate * getattr(p, name) / 1000.0)) < 1:  # As LogMelSpectrogram rounds.
      yield (f"--{name}={getattr(p, name)}: must be at least one sample, {sample_ms:g} ms "
             f"at --sample_rate={p.sample_rate}")
  if p.frame_ms > p.clip_seconds * 1000.0:
    yield f"--frame_ms={p.frame_ms}: must fit in a clip, --clip_seconds={p.clip_seconds}"
  if p.trial_steps < p.trial_epochs:
    yield (f"--trial_steps={p.trial_steps}: must be >= --trial_epochs={p.trial_epochs}, "
           "as each of a trial's epochs is trial_steps/trial_epochs steps")
  if p.data_service is not None and not DATA_SERVICE_ADDRESS.match(p.data_service):
    yield f"--data_service={p.data_service}: must be grpc://host:port, a dispatcher's address"
  if p.prefetch_device not in ("auto", "none", "") and not p.prefetch_device.startswith("/"):
    yield (f"--prefetch_device={p.prefetch_device}: must be auto, none or a device name such as "
           "/gpu:0")


def to_flagfile(params: Params, path: str, header: Optional[str] = None) -> None:
  """Writes `params` as an absl flagfile that `--flagfile=` reads back to equal Params."""
  lines = [f"# {line}" for line in (header or "").splitlines()]
  defaults = Params()
  for field in dataclasses.fields(Params):
    value = getattr(params, field.name)
    if value is None or value == getattr(defaults, field.name):
      continue
    if isinstance(value, bool):
      lines.append(f"--{field.name}" if value else f"--no{field.name}")
    else:
      lines.append(f"--{field.name}={flag_value(value)}")
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
