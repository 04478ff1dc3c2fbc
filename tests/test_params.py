"""Params.validate: every field checked in one place, each error led by its flag and the allowed values."""

import dataclasses
import glob
import json
import math
import os
import re
import subprocess
import sys

import pytest
from absl import flags

from audioclf.commands import flags as command_flags
from audioclf import params as params_lib
from audioclf.params import ParamError, Params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (field, a value it refuses, what the error must say after "--field=value: ").
REJECTED = [
    ("data_dir", 3, "must be a string, not int"),
    ("manifest", ["a.csv"], "must be a string, not list"),
    ("extra_train_dir", 3, "must be a string, not int"),
    ("validation_percent", -1.0, "must be >= 0 and <= 100"),
    ("validation_percent", 60.0, r"\+ --testing_percent=50.0: must be < 100"),
    ("testing_percent", 101.0, "must be >= 0 and <= 100"),
    ("wanted_words", "yes,_unknown_", "'_unknown_' cannot be a wanted word"),
    ("wanted_words", "yes,no,yes", "must not repeat a word"),
    ("wanted_words", ("yes", 3), "must be a string, not int"),
    ("wanted_words", 7, "must be a string, not int"),
    ("unknown_percent", 10.0, "needs --wanted_words"),
    ("unknown_percent", -1.0, r"must be >= 0 and <= 100 \(of each split's wanted-word clips\)"),
    ("silence_percent", 101.0, "must be >= 0 and <= 100"),
    ("sample_rate", 0, "must be > 0 and <= 768000"),
    ("sample_rate", 16000.0, "must be an integer, not float"),
    ("clip_seconds", 0.0, "must be > 0 and <= 600"),
    ("clip_seconds", 100000.0, r"must be > 0 and <= 600 \(a clip is one example"),
    ("cache_dir", 1.5, "must be a string"),
    ("on_bad_file", "ignore", "must be one of fail, skip"),
    ("resample_quality", "XX", "must be one of QQ, LQ, MQ, HQ, VHQ"),
    ("batch_size", 0, "must be >= 1"),
    ("batch_size", "64", "must be an integer, not str"),
    ("shuffle_seed", -1, r"must be >= 0 and <= 4294967295 \(numpy's seed range\)"),
    ("time_shift_seconds", -0.1, "must be >= 0"),
    ("noise_prob", 1.5, "must be >= 0 and <= 1"),
    ("noise_prob", -0.1, "must be >= 0 and <= 1"),
    ("noise_snr_db", math.nan, "must be a finite number"),
    ("noise_snr_db", "20,5", "must be min,max with min <= max"),
    ("noise_snr_db", "1,2,3", r"must be 2 values \(one level in dB, or min,max\)"),
    ("noise_snr_db", "loud", "must be a number, not str"),
    ("noise_snr_db", {"db": 5}, "must be a comma-separated list, not dict"),
    ("noise_dir", 3, "must be a string"),
    ("speed_perturb", "0,1.1", r"must be > 0 and <= 4 \(min,max factors; 1 keeps the speed\)"),
    ("speed_perturb", "1.1,0.9", "must be min,max with min <= max"),
    ("pitch_shift_semitones", "-13,0", r"must be >= -12 and <= 12 \(min,max in semitones\)"),
    ("tempo_perturb", "1.2,1.1", "must be min,max with min <= max"),
    ("pitch_tempo_prob", 1.5, "must be >= 0 and <= 1"),
    ("reverb_prob", -0.5, "must be >= 0 and <= 1"),
    ("rir_dir", 3, "must be a string"),
    ("reverb_rt60", "0,0.5", r"must be > 0 and <= 10 \(one time in seconds, or min,max\)"),
    ("gain_db", "6,-6", "must be min,max with min <= max"),
    ("tail_prob", 1.2, "must be >= 0 and <= 1"),
    ("tail_keep", "0.2,1", "must be > 0 and < 1"),
    ("mixup_alpha", -0.2, "must be >= 0 and <= 10"),
    ("balanced_sampler", "yes", "must be true or false, not str"),
    ("class_weights", "inverse", "must be one of none, balanced"),
    ("label_smoothing", 1.0, "must be >= 0 and < 1"),
    ("n_mels", 0, "must be >= 1"),
    ("frame_ms", 0.0, "must be > 0"),
    ("frame_ms", 0.01, "must be at least one sample, 0.0625 ms at --sample_rate=16000"),
    ("frame_ms", 2000.0, "must fit in a clip, --clip_seconds=1.0"),
    ("stride_ms", -10.0, "must be > 0"),
    ("fmin", -1.0, "must be >= 0"),
    ("fmin", 7600.0, "must be < --fmax=7600.0"),
    ("fmax", 0.0, "must be > 0"),
    ("fmax", 9000.0, r"must be <= sample_rate/2 = 8000 Hz.*--sample_rate=16000"),
    ("spec_augment", "yes", "must be true or false, not str"),
    ("freq_masks", -1, "must be >= 0"),
    ("freq_mask_bins", -2, "must be >= 0"),
    ("time_masks", 1.5, "must be an integer, not float"),
    ("time_mask_frames", -1, "must be >= 0"),
    ("model", "my models.py", "must be a registered model's name .* or module:function"),
    ("model_args", "width", r"must be name=value pairs \(a=1,b=2\) or a JSON object, not str"),
    ("model_args", "[1, 2]", "must be name=value pairs"),
    ("dropout", 1.5, "must be >= 0 and < 1"),
    ("dropout", 1.0, "must be >= 0 and < 1"),
    ("embedding_views", 65, r"must be >= 0 and <= 64 \(each view is a cached embedding of every clip\)"),
    ("engine", "jax", "must be one of keras, estimator"),
    ("model_dir", 0, "must be a string"),
    ("train_steps", -5, "must be >= 1"),
    ("train_steps", 0, "must be >= 1"),
    ("eval_every_steps", -1, r"must be >= 0 \(0 evaluates once, at the end\)"),
    ("learning_rate", 0.0, "must be > 0"),
    ("learning_rate", math.inf, "must be a finite number"),
    ("lr_schedule", "step", "must be one of constant, cosine"),
    ("optimizer", "adagrad", "must be one of adam, sgd, rmsprop, model"),
    ("optimizer_args", "epsilon", r"must be name=value pairs \(a=1,b=2\) or a JSON object"),
    ("optimizer_args", "learning_rate=0.1", "give the learning rate as --learning_rate"),
    ("seed", None, r"must be set \(an integer\)"),
    ("seed", 2**32, "must be >= 0 and <= 4294967295"),
    ("keep_best", "accuracy", "must be one of none, val_accuracy, val_loss"),
    ("early_stopping_patience", -1, r"must be >= 0 \(0 never stops early\)"),
    ("early_stopping_patience", 3, "needs --keep_best=val_accuracy or val_loss"),
    ("log_every_steps", -1, "must be >= 0"),
    ("prefetch_device", "gpu0", "must be auto, none or a device name such as /gpu:0"),
    ("strategy", "tpu", "must be one of auto, mirrored"),
    ("data_service", "host:5050", "must be grpc://host:port"),
    ("tuner", "grid", "must be one of random, hyperband, bayesian"),
    ("max_trials", 0, "must be >= 1"),
    ("tune_dir", 7, "must be a string"),
    ("trial_steps", 0, "must be >= 1"),
    ("trial_steps", 3, "must be >= --trial_epochs=4"),
    ("trial_epochs", 0, "must be >= 1"),
]


@pytest.mark.parametrize("field, value, match", REJECTED)
def test_a_bad_value_names_its_flag_and_what_is_allowed(field, value, match):
  changes = {field: value}
  if match.startswith(r"\+ --testing_percent"):
    changes["testing_percent"] = 50.0
  params = Params(**changes)  # A list field reads "a,b" and [a, b] alike: the error spells it so.
  shown = params_lib.flag_value(getattr(params, field))
  with pytest.raises(ParamError, match=rf"^--{field}={re.escape(shown)}(: | ){match}"):
    params.validate()


def test_every_field_has_help_a_rule_and_a_rejected_value():
  fields = {f.name for f in dataclasses.fields(Params)}
  assert all(f.metadata["help"] and isinstance(f.metadata["rule"], params_lib.Rule)
             for f in dataclasses.fields(Params))
  assert {field for field, _, _ in REJECTED} == fields


def test_defaults_and_edges_that_work_are_accepted():
  assert Params().validate() == Params()
  Params(sample_rate=8000, fmax=4000.0, clip_seconds=600.0, dropout=0.0, noise_prob=1.0,
         eval_every_steps=0, log_every_steps=0, shuffle_seed=None, noise_snr_db=-5.0,
         wanted_words=("yes", "no"), unknown_percent=100.0, silence_percent=0.0,
         validation_percent=0, testing_percent=0, trial_steps=4, prefetch_device="none",
         time_shift_seconds=0.0).validate()
  Params(prefetch_device="/gpu:1", data_dir="d", model_dir="m", resample_quality="VHQ").validate()
  Params(keep_best="val_loss", early_stopping_patience=2, eval_every_steps=10).validate()
  with pytest.raises(ParamError, match=r"^--early_stopping_patience=2: needs --eval_every_steps"):
    Params(keep_best="val_loss", early_stopping_patience=2).validate()


def test_list_fields_read_lists_strings_and_json_alike():
  p = Params(wanted_words="yes, no,,up", noise_snr_db="5,20").validate()
  assert p.wanted_words == ("yes", "no", "up") and p.noise_snr_db == (5.0, 20.0)
  assert Params(wanted_words=["yes", "no", "up"], noise_snr_db=[5, 20]) == p
  assert Params(noise_snr_db=12).noise_snr_db == (12.0, 12.0)  # One level: a fixed SNR.
  assert Params.from_dict(json.loads(p.to_json())) == p
  # A params.json written before the SNR range: its single level still reads.
  assert Params.from_dict({"noise_snr_db": 20.0}) == Params()


def test_list_fields_through_flags_and_flagfile(tmp_path):
  flag_values = flags.FlagValues()
  command_flags.define_flags(flag_values)
  flag_values(["prog", "--wanted_words=yes,no", "--noise_snr_db=-5,10", "--unknown_percent=10",
               "--silence_percent=10"])
  p = command_flags.params_from_flags(flag_values)
  assert (p.wanted_words, p.noise_snr_db) == (("yes", "no"), (-5.0, 10.0))
  params_lib.to_flagfile(p, str(tmp_path / "p.flags"))
  again = flags.FlagValues()
  command_flags.define_flags(again)
  again(["prog", f"--flagfile={tmp_path / 'p.flags'}"])
  assert command_flags.params_from_flags(again) == p
  augmenting = flags.FlagValues()
  command_flags.define_flags(augmenting)
  augmenting(["prog", "--speed_perturb=0.9,1.1", "--gain_db=3", "--balanced_sampler",
              "--class_weights=balanced", "--freq_mask_bins=4", "--rir_dir=rooms"])
  p = command_flags.params_from_flags(augmenting)
  assert (p.speed_perturb, p.gain_db, p.balanced_sampler, p.class_weights, p.freq_mask_bins,
          p.rir_dir) == ((0.9, 1.1), (3.0, 3.0), True, "balanced", 4, "rooms")
  params_lib.to_flagfile(p, str(tmp_path / "a.flags"))
  again = flags.FlagValues()
  command_flags.define_flags(again)
  again(["prog", f"--flagfile={tmp_path / 'a.flags'}"])
  assert command_flags.params_from_flags(again) == p
  old = flags.FlagValues()
  command_flags.define_flags(old)
  old(["prog", "--noise_snr_db=20"])  # As flags/speech_commands.flags long said.
  assert command_flags.params_from_flags(old).noise_snr_db == (20.0, 20.0)


def test_a_param_error_is_a_value_error():
  assert issubclass(ParamError, ValueError)  # Callers that caught ValueError still do.


def test_params_import_no_tensorflow():
  # The check runs before anything heavy is loaded: a fresh interpreter proves it.
  code = ("import sys, audioclf, audioclf.commands.flags; audioclf.Params().validate(); "
          "print('tensorflow' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
  assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("flagfile", sorted(glob.glob(os.path.join(ROOT, "flags", "*.flags"))))
def test_every_preset_is_valid(flagfile, monkeypatch):
  monkeypatch.chdir(ROOT)  # Their data paths are relative to the repository.
  command_flags.params_from_flags(command_flags.recipe([f"--flagfile={flagfile}"]))


def test_flags_take_any_value_and_params_refuses_it_naming_the_flag():
  flag_values = flags.FlagValues()
  command_flags.define_flags(flag_values)
  flag_values(["prog", "--on_bad_file=ignore"])  # No absl validator: one place checks.
  with pytest.raises(ParamError, match="^--on_bad_file=ignore: must be one of fail, skip$"):
    command_flags.params_from_flags(flag_values)


def test_registries_named_in_params_exist():
  import importlib  # pylint: disable=g-import-not-at-top
  import keras_tuner as kt  # pylint: disable=g-import-not-at-top
  from audioclf.compat import keras  # pylint: disable=g-import-not-at-top
  for engine in params_lib.ENGINES:
    assert importlib.util.find_spec(f"audioclf.engines.{engine}_engine"), engine
  assert all(hasattr(keras.optimizers, name) for name in params_lib.OPTIMIZERS.values())
  assert all(hasattr(kt, name) for name in params_lib.TUNERS.values())


def test_every_field_the_data_layer_reads_is_marked_data():
  # input_fn's memo of warm datasets is keyed on the fields marked data=True: one the data
  # layer reads without the mark would hand out a dataset built for another value.
  read = set()
  for path in glob.glob(os.path.join(ROOT, "audioclf", "data", "*.py")):
    with open(path) as f:
      read |= set(re.findall(r"\bparams\.([a-z_]+)\b", f.read()))
  fields = {f.name: f.metadata["data"] for f in dataclasses.fields(Params)}
  unmarked = sorted(name for name in read if name in fields and not fields[name])
  assert not unmarked
  assert {name for name, data in fields.items() if data} >= {"batch_size", "sample_rate", "seed"}


def test_the_data_key_ignores_model_and_optimizer_fields():
  base = Params()
  assert base.replace(model_args={"width": 8}, optimizer="sgd",
                      learning_rate=0.1).data_key() == base.data_key()
  assert base.replace(batch_size=8).data_key() != base.data_key()
