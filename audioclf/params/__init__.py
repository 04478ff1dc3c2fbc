"""Params: every setting of a run, each field's type, default, help and rule written once.

  __init__.py    Params, its fields and its one validate()
  choices.py     the named choices and limits the fields refer to (engines, optimizers, ...)
  rule.py        Rule: what a field accepts besides its type; reading a value as that type
  checks.py      the limits that join fields (fmin < fmax, patience needs --keep_best, ...)
  model_args.py  ModelArgs: --model_args and --optimizer_args, read and spelt as flags
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Mapping, Optional

from audioclf.params.checks import joint_problems
from audioclf.params.choices import (  # The choices are Params' to name: re-exported.
  BEST_METRICS,
  BUILDERS_OPTIMIZER,
  DATA_SERVICE_ADDRESS,
  ENGINES,
  MAX_CLIP_SECONDS,
  MODEL_NAME,
  MODES,
  OPTIMIZERS,
  SPLITS,
  TUNERS,
)
from audioclf.params.model_args import ModelArgs, flag_value, parse_model_args
from audioclf.params.rule import Rule, as_tuple, range_fields


class ParamError(ValueError):
  """A parameter value that cannot work; the message starts with its flag, `--name=value`."""


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
  extra_train_dir: Optional[str] = _field(
      None, "Folder of one sub-folder per label of more training recordings (say k real clips "
      "of each word beside synthesized ones): every file goes to the train split.", data=True)
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
  # from (seed, batch number), in this order: tail, voice, room, noise (above), gain, mixup.
  tail_prob: float = _field(
      0.0, "Training: chance that a keyword example (not _silence_ or _unknown_) becomes a word "
      "tail labelled _unknown_: moved back until only the end of its word (--tail_keep of it) "
      "is left at the window's start, as a stream's window holds a word leaving it. Needs an "
      "_unknown_ class.", Rule(ge=0, le=1), data=True)
  tail_keep: tuple[float, ...] = _field(
      (0.2, 0.6), "Training, with --tail_prob: the share of its word a tail keeps, drawn from "
      "min,max.", Rule(gt=0, lt=1, size=2, why="min,max shares of the word"), data=True)
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
      object.__setattr__(self, name, as_tuple(getattr(self, name), item, name in _RANGES))
    for name in ("model_args", "optimizer_args"):
      args = getattr(self, name)
      if isinstance(args, str):
        args = parse_model_args(args)
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
    problem = next(joint_problems(self), None)
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
_RANGES = range_fields(Params)


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
