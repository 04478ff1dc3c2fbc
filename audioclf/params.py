"""The frozen parameters every part of audioclf reads: data, decoding, features, model, training."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

MODES = ("train", "eval", "infer")  # The strings of tf.estimator.ModeKeys.
SPLITS = ("train", "validation", "test")
BAD_FILE_POLICIES = ("fail", "skip")


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
  noise_prob: float = 0.0  # Train only: chance to add white noise to an example.
  noise_snr_db: float = 20.0

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

  # --- Hyperparameter search (python -m audioclf.tune).
  tuner: str = "random"  # "random" | "hyperband" | "bayesian"
  max_trials: int = 10
  tune_dir: Optional[str] = None  # keras-tuner project; None: <model_dir>/tune.
  trial_steps: int = 200  # Training steps per trial (Hyperband: the largest budget).
  trial_epochs: int = 4  # A trial is this many epochs of trial_steps/trial_epochs (Hyperband: max_epochs).

  def replace(self, **changes: Any) -> "Params":
    return dataclasses.replace(self, **changes)

  @property
  def clip_samples(self) -> int:
    return int(round(self.clip_seconds * self.sample_rate))

  def validate(self) -> "Params":
    """Raises ValueError for values that cannot work; returns self."""
    if self.on_bad_file not in BAD_FILE_POLICIES:
      raise ValueError(f"on_bad_file must be one of {BAD_FILE_POLICIES}, got {self.on_bad_file!r}")
    if self.sample_rate <= 0 or self.clip_seconds <= 0:
      raise ValueError("sample_rate and clip_seconds must be positive")
    if self.batch_size <= 0:
      raise ValueError("batch_size must be positive")
    if not 0 <= self.validation_percent + self.testing_percent < 100:
      raise ValueError("validation_percent + testing_percent must be in [0, 100)")
    if self.prefetch_device not in ("auto", "none", "") and not self.prefetch_device.startswith("/"):
      raise ValueError("prefetch_device must be auto, none or a device name such as /gpu:0, "
                       f"got {self.prefetch_device!r}")
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
