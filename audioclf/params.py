"""Params: every setting of a run, each field's type, default, help and rule written once."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import numbers
import operator
import re
import typing
from typing import Any, Iterator, Mapping, Optional, Union

MODES = ("train", "eval", "infer")  # The strings of tf.estimator.ModeKeys.
SPLITS = ("train", "validation", "test")
# Name -> the Keras optimizer class (the same name in Keras 2 and 3): the one list of optimizers.
OPTIMIZERS = {"adam": "Adam", "sgd": "SGD", "rmsprop": "RMSprop"}
# --optimizer's other choice: the one a whole model's builder compiled its model with (a team's
# model as it trained before, which audioclf.migration carries, with any schedule of its own).
BUILDERS_OPTIMIZER = "model"
# The engines; each is the module audioclf.engines.<name>_engine (audioclf.engines.get).
ENGINES = ("keras", "estimator")
# Name -> keras-tuner's tuner class: the one list of tuners (audioclf.tuning.tuners).
TUNERS = {"random": "RandomSearch", "hyperband": "Hyperband", "bayesian": "BayesianOptimization"}
# A model: a short name registered as an entry point (audioclf.model.registry), or module:function.
MODEL_NAME = re.compile(r"^(?:[A-Za-z_][\w.]*:[A-Za-z_]\w*|[A-Za-z_][\w-]*)$")
# The validation metrics a run can keep its best checkpoint by (and stop early on).
BEST_METRICS = ("val_accuracy", "val_loss")
DATA_SERVICE_ADDRESS = re.compile(r"^grpc://[^:/\s]+:\d+$")
MAX_CLIP_SECONDS = 600


class ParamError(ValueError):
  """A parameter value that cannot work; the message starts with its flag, `--name=value`."""


class ModelArgs(dict):
  """A model's own hyperparameters (--model_args), or an optimizer's: a frozen, hashable dict.

  Given as a dict, JSON (`{"blocks": 3}`) or name=value pairs
  (`blocks=3,width=48`), each value read as JSON where it is JSON (3, 0.5,
  true, "relu", [1, 2]) and as a string otherwise. Lists become tuples, so
  the whole stays hashable. Which names a model takes, and of what types, its
  own signature says: audioclf.model.registry checks them.
  """

  def __init__(self, value: Union[str, Mapping[str, Any], Any] = ()):
    if isinstance(value, str):
      value = _parse_model_args(value)
    super().__init__({str(k): _frozen(v) for k, v in dict(value).items()})

  def __hash__(self):
    return hash(tuple(sorted(self.items())))

  def _frozen_error(self, *args, **kwargs):
    raise TypeError("ModelArgs are frozen: make new ones (params.replace(model_args=...))")

  __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _frozen_error

  def __repr__(self):
    return f"ModelArgs({dict(self)!r})"

  def flag(self) -> str:
    """As --model_args spells them: name=value pairs, or JSON where a value would not read back."""
    pairs = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in self.items()]
    if all("," not in p and p.count("=") == 1 and _parse_value(p.split("=", 1)[1]) == v
           for p, v in zip(pairs, self.values())):
      return ",".join(pairs)
    return json.dumps(dict(self), sort_keys=True)


def _frozen(value: Any) -> Any:
  return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _parse_value(text: str) -> Any:
  try:
    return _frozen(json.loads(text))
  except ValueError:
    try:  # Python's spelling too: True, False, None, (1, 2).
      return _frozen(ast.literal_eval(text))
    except (ValueError, SyntaxError):
      return text


def _parse_model_args(text: str) -> Any:
  """--model_args' text as a dict; the text itself where it is neither JSON nor name=value pairs."""
  text = text.strip()
  if not text:
    return {}
  if text.startswith("{"):
    try:
      value = json.loads(text)
    except ValueError:
      return text
    return value if isinstance(value, dict) else text
  pairs = [part.split("=", 1) for part in text.split(",") if part.strip()]
  if any(len(pair) != 2 or not pair[0].strip().isidentifier() for pair in pairs):
    return text
  return {k.strip(): _parse_value(v.strip()) for k, v in pairs}


@dataclasses.dataclass(frozen=True)
class Rule:
  """What a field accepts besides its type: bounds (inclusive ge/le, exclusive gt/lt) or choices."""

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


def _field(default: Any, help_: str, rule: Rule = Rule(), *, data: bool = False) -> Any:
  """A Params field: its default, its flag's help and what it accepts besides its type, together.

  `data`: the data layer reads it, so input_fn's datasets depend on it; the
  other fields (model, optimizer, training loop) leave a dataset as it is.
  """
  return dataclasses.field(default=default, metadata={"help": help_, "rule": rule, "data": data})


@dataclasses.dataclass(frozen=True)
class Params:
  """Everything a run needs; built from absl flags or directly in Python.

  Library code takes a `Params`, never absl's FLAGS, so audioclf imports
  cleanly in notebooks, tests and the tuner. Use `dataclasses.replace` (or
  `params.replace(...)`) to derive variants. Each field's flag (same name)
  and its help come from the field itself (audioclf.commands.flags).
  """

  # --- Data source: a folder per label (Speech Commands layout) or a CSV manifest.
  data_dir: Optional[str] = _field(
      None, "Folder with one sub-folder of audio files per label (Speech Commands layout).",
      data=True)
  manifest: Optional[str] = _field(
      None, "CSV file of path,label[,split] rows, paths relative to the CSV.", data=True)
  validation_percent: float = _field(
      10.0, "Share of speakers hashed to validation when no list/CSV column says.",
      Rule(ge=0, le=100), data=True)
  testing_percent: float = _field(
      10.0, "Share of speakers hashed to test when no list/CSV column says.", Rule(ge=0, le=100),
      data=True)
  wanted_words: tuple[str, ...] = _field(
      (), "The words to classify (Speech Commands' 12-class task: yes,no,up,down,left,right,on,"
      "off,stop,go); the other labels become _unknown_. Empty: every label is a class.",
      data=True)
  unknown_percent: float = _field(
      0.0, "With --wanted_words: _unknown_ clips (other words, chosen by a stable hash) as a "
      "percentage of each split's wanted-word clips.",
      Rule(ge=0, le=100, why="of each split's wanted-word clips"), data=True)
  silence_percent: float = _field(
      0.0, "_silence_ clips (zeros plus background noise) as a percentage of each split's "
      "wanted-word clips.", Rule(ge=0, le=100, why="of each split's wanted-word clips"),
      data=True)

  # --- Decoding and the persistent cache.
  sample_rate: int = _field(16000, "Rate every file is resampled to (soxr), in Hz.",
                            Rule(gt=0, le=768_000), data=True)
  clip_seconds: float = _field(
      1.0, "Length of each example fed to the model.",
      Rule(gt=0, le=MAX_CLIP_SECONDS, why="a clip is one example, decoded, cached and batched "
           "whole: 600 s at 16 kHz is already 38 MB per example"), data=True)
  cache_dir: Optional[str] = _field(
      None, "Persistent cache of decoded clips (default $AUDIOCLF_CACHE_DIR or "
      "~/.cache/audioclf).", data=True)
  on_bad_file: str = _field(
      "fail", "What to do with an unreadable/truncated/empty file: fail (error naming it) or skip.",
      Rule(choices=("fail", "skip")), data=True)
  resample_quality: str = _field("HQ", "soxr quality recipe: QQ, LQ, MQ, HQ or VHQ.",
                                 Rule(choices=("QQ", "LQ", "MQ", "HQ", "VHQ")), data=True)

  # --- Pipeline.
  batch_size: int = _field(64, "Examples per batch.", Rule(ge=1), data=True)
  shuffle_seed: Optional[int] = _field(
      0, "Seed of the file shuffle; unset for a new order every run.", _SEED, data=True)
  time_shift_seconds: float = _field(
      0.1, "Training: random shift of the clip window, in seconds.", Rule(ge=0), data=True)
  noise_prob: float = _field(
      0.0, "Training: chance of mixing noise into an example: an excerpt of a background "
      "recording (--noise_dir, else <data_dir>/_background_noise_), else white noise.",
      Rule(ge=0, le=1), data=True)
  noise_snr_db: tuple[float, ...] = _field(
      (20.0, 20.0), "Training: signal-to-noise ratio of that noise in dB: one level, or min,max "
      "of a uniform range.", Rule(size=2, why="one level in dB, or min,max"), data=True)
  noise_dir: Optional[str] = _field(
      None, "Folder of long background recordings (any format soundfile reads) to mix into "
      "training examples; default <data_dir>/_background_noise_ where it exists.",
      data=True)

  # --- Augmentation after the cache: training only, each drawn per example by the sampler
  # from (seed, batch number), in this order: voice, room, noise (above), gain, mixup.
  speed_perturb: tuple[float, ...] = _field(
      (1.0, 1.0), "Training: resample each example by a factor drawn from min,max (0.9,1.1 as "
      "Kaldi's speed perturbation): tempo and pitch change together. 1,1 is off.",
      Rule(gt=0, le=4, size=2, why="min,max factors; 1 keeps the speed"), data=True)
  pitch_shift_semitones: tuple[float, ...] = _field(
      (0.0, 0.0), "Training: shift each example's pitch by semitones drawn from min,max, tempo "
      "kept (a phase vocoder, about as costly as the log-mel front end). 0,0 is off.",
      Rule(ge=-12, le=12, size=2, why="min,max in semitones"), data=True)
  tempo_perturb: tuple[float, ...] = _field(
      (1.0, 1.0), "Training: stretch each example's tempo by a factor drawn from min,max, pitch "
      "kept (the same phase vocoder). 1,1 is off.",
      Rule(gt=0, le=4, size=2, why="min,max factors; 1 keeps the tempo"), data=True)
  pitch_tempo_prob: float = _field(
      1.0, "Training, with --pitch_shift_semitones or --tempo_perturb: chance that an example "
      "goes through the phase vocoder (an STFT and its inverse per example: the costliest "
      "augmentation; the others take its factors as 1).", Rule(ge=0, le=1), data=True)
  reverb_prob: float = _field(
      0.0, "Training: chance of convolving an example with a room impulse response (--rir_dir, "
      "else one of a bank of synthetic ones, --reverb_rt60).", Rule(ge=0, le=1), data=True)
  rir_dir: Optional[str] = _field(
      None, "Folder of room impulse responses (any format soundfile reads), decoded once into "
      "the cache; unset: synthetic ones, exponentially decaying noise.", data=True)
  reverb_rt60: tuple[float, ...] = _field(
      (0.2, 0.8), "Training, synthetic impulse responses: reverberation time (60 dB decay) in "
      "seconds: one value, or min,max, spread evenly over a bank of responses drawn once "
      "from --seed. A direct path at equal energy leads each tail.",
      Rule(gt=0, le=10, size=2, why="one time in seconds, or min,max"), data=True)
  gain_db: tuple[float, ...] = _field(
      (0.0, 0.0), "Training: scale each example by a gain in dB drawn from min,max (after the "
      "noise, so its SNR holds). 0,0 is off.", Rule(ge=-60, le=60, size=2, why="min,max in dB"),
      data=True)
  mixup_alpha: float = _field(
      0.0, "Training: mixup (Zhang et al. 2018): each example mixed with another of its batch "
      "by a weight drawn from Beta(alpha, alpha), and the labels with it (soft labels); 0 is "
      "off, 0.2-0.4 is usual.", Rule(ge=0, le=10), data=True)

  # --- Imbalance and label noise.
  balanced_sampler: bool = _field(
      False, "Training: draw every class equally often (each batch holds them evenly; within a "
      "class, a new permutation of its clips each time they run out) instead of the split as "
      "it is.", data=True)
  class_weights: str = _field(
      "none", "Weigh each example's loss by its class: none, or balanced (n / (classes x "
      "count), scikit-learn's formula, from the training split's counts).",
      Rule(choices=("none", "balanced")))
  label_smoothing: float = _field(
      0.0, "Train towards (1 - e) on the label and e / classes on every class.",
      Rule(ge=0, lt=1))

  # --- Features (computed inside the model, so every path takes raw audio).
  n_mels: int = _field(40, "Mel bands of the log-mel front end.", Rule(ge=1))
  frame_ms: float = _field(30.0, "STFT window length in milliseconds.", Rule(gt=0))
  stride_ms: float = _field(10.0, "STFT hop in milliseconds.", Rule(gt=0))
  fmin: float = _field(20.0, "Lowest mel frequency in Hz.", Rule(ge=0))
  fmax: float = _field(7600.0, "Highest mel frequency in Hz.", Rule(gt=0))
  spec_augment: bool = _field(True, "Mask random time and frequency bands while training.")
  freq_masks: int = _field(2, "SpecAugment: frequency masks per example.", Rule(ge=0))
  freq_mask_bins: Optional[int] = _field(
      None, "SpecAugment: the widest frequency mask, in mel bands (default n_mels // 5).",
      Rule(ge=0))
  time_masks: int = _field(2, "SpecAugment: time masks per example.", Rule(ge=0))
  time_mask_frames: Optional[int] = _field(
      None, "SpecAugment: the widest time mask, in frames (default a tenth of the clip's).",
      Rule(ge=0))

  # --- Model.
  model: str = _field(
      "cnn", "The model: a registered name (cnn, ds_cnn, bc_resnet, matchboxnet, or one a "
      "package registers) or module:function, the module found on PYTHONPATH. See "
      "docs/your_model.md.")
  model_args: ModelArgs = _field(
      ModelArgs(), "The model's own hyperparameters, checked against its signature: "
      "name=value pairs (width=32,blocks=3) or JSON.")
  dropout: float = _field(0.2, "Dropout rate before the classifier.", Rule(ge=0, lt=1))
  embedding_views: int = _field(
      0, "Keras engine, a model with a pretrained front end (--model=speech_embedding): run "
      "each training clip once, in this many views (the centre window, then views with the "
      "training augmentations drawn from --seed), through the part of the front end that "
      "does not train (all of it with trainable=frozen), cache the result beside the clip "
      "split, and train the rest on it. 0 trains from audio.",
      Rule(ge=0, le=64, why="each view is a cached embedding of every clip"))

  # --- Training.
  engine: str = _field(
      "keras", "Training engine: keras (model.fit) or estimator (model_to_estimator; legacy "
      "stack).", Rule(choices=ENGINES))
  model_dir: Optional[str] = _field(
      None, "Where checkpoints, logs, labels.txt, params.json and metrics.json go.")
  train_steps: int = _field(
      1000, "Total training steps (a resumed run continues up to this count).", Rule(ge=1))
  eval_every_steps: int = _field(
      0, "Evaluate every this many steps (Keras: an epoch of this size); 0 evaluates once at "
      "the end.", Rule(ge=0, why="0 evaluates once, at the end"))
  learning_rate: float = _field(
      1e-3, "Optimizer learning rate (the peak, with --lr_schedule=cosine).", Rule(gt=0))
  lr_schedule: str = _field(
      "constant", "constant, or cosine: decay the learning rate to 0 at train_steps.",
      Rule(choices=("constant", "cosine")))
  optimizer: str = _field(
      "adam", "adam, sgd, rmsprop, or model: the optimizer a whole model's builder compiled it "
      "with, its own learning rate and schedule included (--learning_rate and --lr_schedule "
      "do not apply).", Rule(choices=(*OPTIMIZERS, BUILDERS_OPTIMIZER)))
  optimizer_args: ModelArgs = _field(
      ModelArgs(), "The optimizer's other constructor arguments (momentum=0.9 for sgd; "
      "epsilon=1e-14), name=value pairs or JSON; with --optimizer=model they replace the "
      "builder's values (learning_rate too).")
  seed: int = _field(0, "Seed of weights and augmentation.", _SEED, data=True)
  keep_best: str = _field(
      "none", "Keep the checkpoint of the best validation evaluation so far in <model_dir>/best/, "
      "beside the latest: by val_accuracy (highest) or val_loss (lowest); none keeps only the "
      "latest; a tie is broken by the other one (an equal accuracy by a lower loss). evaluate, "
      "predict, export and migrate then take the best by default.",
      Rule(choices=("none", *BEST_METRICS)))
  early_stopping_patience: int = _field(
      0, "Stop training after this many evaluations in a row without a new best --keep_best "
      "value; 0 trains to --train_steps.", Rule(ge=0, why="0 never stops early"))
  log_every_steps: int = _field(50, "Log and write summaries every this many steps.",
                                Rule(ge=0, why="0 logs once per evaluation"))
  prefetch_device: str = _field(
      "auto", "Copy training batches to this device while the step before them runs: auto "
      "(the first GPU, when there is one), none, or a name like /gpu:1.")
  strategy: str = _field(
      "auto", "Keras engine: auto (MultiWorkerMirroredStrategy when TF_CONFIG names several "
      "workers, else one device) or mirrored (every GPU of this host, else its logical CPUs).",
      Rule(choices=("auto", "mirrored")))
  data_service: Optional[str] = _field(
      None, "grpc://host:port of a tf.data service dispatcher (python -m audioclf service): "
      "training batches come from its workers.", data=True)

  # --- Hyperparameter search (python -m audioclf tune).
  tuner: str = _field("random", "keras-tuner algorithm: random, hyperband or bayesian.",
                      Rule(choices=tuple(TUNERS)))
  max_trials: int = _field(10, "Trials of the search (Hyperband: its budget in full trials).",
                           Rule(ge=1))
  tune_dir: Optional[str] = _field(
      None, "keras-tuner project folder (default <model_dir>/tune); a rerun resumes it.")
  trial_steps: int = _field(200, "Training steps of one trial (Hyperband: of its longest trials).",
                            Rule(ge=1))
  trial_epochs: int = _field(
      4, "Epochs of one trial, each trial_steps/trial_epochs steps and ended by an evaluation; "
      "the best one scores the trial (Hyperband: its max_epochs).", Rule(ge=1))

  def __post_init__(self):
    # Flags, JSON and callers give lists as lists, comma strings or (a range) one number.
    for name, item in _ITEMS.items():
      object.__setattr__(self, name, _as_tuple(getattr(self, name), item, name in _RANGES))
    for name in ("model_args", "optimizer_args"):
      args = getattr(self, name)
      if isinstance(args, str):
        args = _parse_model_args(args)
      if isinstance(args, Mapping):  # Else left as given, for validate to refuse.
        object.__setattr__(self, name, ModelArgs(args))

  def data_key(self) -> tuple:
    """The values of every field the data layer reads: equal keys, equal datasets."""
    return tuple((f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                 if f.metadata["data"])

  def replace(self, **changes: Any) -> "Params":
    return dataclasses.replace(self, **changes)

  @property
  def clip_samples(self) -> int:
    return int(round(self.clip_seconds * self.sample_rate))

  def validate(self) -> "Params":
    """Checks every field against its rule, then the limits that join fields.

    Returns:
      self, for chaining.

    Raises:
      ParamError: the first value that cannot work, as "--name=value: must be
        <the allowed range or choices>".
    """
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      problem = field.metadata["rule"].problem(value, _TYPES[field.name], _ITEMS.get(field.name))
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
    """Builds Params from a dict, ignoring keys this version does not know.

    A params.json from before --model_args holds the built-in models' width
    as a field of its own: it becomes their model argument.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    values = dict(values)
    width = values.pop("width", None)
    if width is not None and "model_args" not in values:
      values["model_args"] = {"width": width}
    return cls(**{k: v for k, v in values.items() if k in names})

  @classmethod
  def from_json(cls, path: str) -> "Params":
    with open(path) as f:
      return cls.from_dict(json.load(f))


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               tuple: "a comma-separated list",
               ModelArgs: "name=value pairs (a=1,b=2) or a JSON object"}


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
# The min,max fields (their rule's size is 2): a single value v means v,v.
_RANGES = frozenset(f.name for f in dataclasses.fields(Params) if f.metadata["rule"].size == 2)


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
  if isinstance(value, ModelArgs):
    return value.flag()
  if isinstance(value, tuple):
    return ",".join(str(v) for v in value)
  return str(value)


def _joint_problems(p: Params) -> Iterator[str]:
  """The limits that join fields, each message led by the flag to change."""
  for problems in (_model_problems, _range_problems, _label_problems, _feature_problems,
                   _training_problems, _input_problems):
    yield from problems(p)


def _model_problems(p: Params) -> Iterator[str]:
  """The model's name, and how the optimizer flags go with a builder's own optimizer."""
  if not MODEL_NAME.match(p.model):
    yield (f"--model={p.model}: must be a registered model's name (cnn, ds_cnn, ...) or "
           "module:function")
  if p.optimizer == BUILDERS_OPTIMIZER and p.lr_schedule != "constant":
    yield (f"--lr_schedule={p.lr_schedule}: --optimizer=model keeps the builder's own learning "
           "rate (and schedule); leave --lr_schedule constant")
  if "learning_rate" in p.optimizer_args and p.optimizer != BUILDERS_OPTIMIZER:
    yield (f"--optimizer_args={p.optimizer_args.flag()}: give the learning rate as "
           "--learning_rate (optimizer_args may set it only with --optimizer=model)")


def _range_problems(p: Params) -> Iterator[str]:
  """The min,max fields: min <= max."""
  for name in sorted(_RANGES):
    low, high = getattr(p, name)
    if low > high:
      yield f"--{name}={flag_value(getattr(p, name))}: must be min,max with min <= max"


def _label_problems(p: Params) -> Iterator[str]:
  """The wanted words, the unknown ones, and the splits that leave files to train on."""
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


def _feature_problems(p: Params) -> Iterator[str]:
  """The log-mel's frequencies and frames against the sample rate and the clip."""
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


def _training_problems(p: Params) -> Iterator[str]:
  """A tuner trial's steps, and what early stopping needs."""
  if p.trial_steps < p.trial_epochs:
    yield (f"--trial_steps={p.trial_steps}: must be >= --trial_epochs={p.trial_epochs}, "
           "as each of a trial's epochs is trial_steps/trial_epochs steps")
  if p.early_stopping_patience and p.keep_best == "none":
    yield (f"--early_stopping_patience={p.early_stopping_patience}: needs --keep_best="
           f"{' or '.join(BEST_METRICS)}, the metric it watches")
  if p.early_stopping_patience and not p.eval_every_steps:
    yield (f"--early_stopping_patience={p.early_stopping_patience}: needs --eval_every_steps > 0 "
           "(with 0 the run evaluates once, at its end)")


def _input_problems(p: Params) -> Iterator[str]:
  """Where batches come from (a tf.data service) and go to (a device)."""
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
