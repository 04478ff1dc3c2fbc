"""The absl flags of every audioclf command, defined in one place and read once into Params."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Sequence

from absl import flags

from audioclf.params import SPLITS, ModelArgs, Params, field_types
from audioclf.synthesis import settings as synthesis_settings


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines one flag per Params field, defaulting to Params' default. Idempotent.

  The flags take any value of their type: Params.validate, the one place
  that knows each field's range, checks them when they are read.
  """
  types = field_types()
  for field in dataclasses.fields(Params):
    if field.name in flag_values:
      continue
    tp = types[field.name][0]
    default, help_ = field.default, field.metadata["help"]
    if tp is bool:
      flags.DEFINE_bool(field.name, default, help_, flag_values=flag_values)
    elif tp is int:
      flags.DEFINE_integer(field.name, default, help_, flag_values=flag_values)
    elif tp is float:
      flags.DEFINE_float(field.name, default, help_, flag_values=flag_values)
    elif tp is tuple:
      flags.DEFINE_list(field.name, [str(v) for v in default], help_, flag_values=flag_values)
    elif tp is ModelArgs:
      flags.DEFINE_string(field.name, default.flag(), help_, flag_values=flag_values)
    else:
      flags.DEFINE_string(field.name, default, help_, flag_values=flag_values)


def params_from_flags(flag_values: flags.FlagValues = flags.FLAGS, **overrides: Any) -> Params:
  """Reads the parsed flags once into a validated Params."""
  values = {f.name: flag_values[f.name].value for f in dataclasses.fields(Params)
            if f.name in flag_values}
  values.update(overrides)
  return Params(**values).validate()


def recipe(args: Sequence[str]) -> flags.FlagValues:
  """The training flags `args` set (--preset= and --flagfile= read as a command reads them).

  Raises:
    ParamError: a preset or flagfile that cannot be read (flagfiles.expand).
  """
  from audioclf.commands import flagfiles  # pylint: disable=g-import-not-at-top
  values = flags.FlagValues()
  define_flags(values)
  values(["audioclf", *flagfiles.expand(args)])
  return values


def define_model_dir_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The Params flags, plus those of the commands that use a trained model_dir. Idempotent."""
  define_flags(flag_values)
  if "split" in flag_values:  # They are defined together: once defines them all.
    return
  flags.DEFINE_string("checkpoint", "best", "The model_dir's checkpoint that evaluate, predict, "
                      "export and migrate --report use: best (the one --keep_best kept, where "
                      "the run kept one, else the latest), last (the latest), or a checkpoint's "
                      "path (e.g. runs/demo/model.ckpt-400).", flag_values=flag_values)
  _define_evaluate_flags(flag_values)
  _define_export_flags(flag_values)
  _define_predict_flags(flag_values)
  _register_model_dir_validators(flag_values)


def _define_evaluate_flags(flag_values: flags.FlagValues) -> None:
  """audioclf evaluate's own flags: what to evaluate on which split, and its report."""
  flags.DEFINE_enum("split", "validation", SPLITS, "Split to evaluate (audioclf evaluate).",
                    flag_values=flag_values)
  flags.DEFINE_string("group_by", None, "audioclf evaluate: also report accuracy per group, the "
                      "weakest first: speaker (the file name before _nohash_) or a column of the "
                      "CSV manifest's header (e.g. path,label,split,speaker).",
                      flag_values=flag_values)
  flags.DEFINE_string("saved_model", None, "audioclf evaluate: evaluate this exported "
                      "SavedModel instead of --model_dir (its params.json, or the flags, "
                      "say where the data is).", flag_values=flag_values)
  flags.DEFINE_string("background", None, "audioclf evaluate, a speech_embedding model_dir: "
                      "an audio file or folder with no keyword spoken (e.g. "
                      "data/speech_words/_background_noise_): report the streaming detector's "
                      "false accepts per hour there, and its false rejects of the --split's "
                      "keyword clips placed into it, with the DET curve.",
                      flag_values=flag_values)
  flags.DEFINE_float("target_false_accepts_per_hour", None, "audioclf evaluate --background: "
                     "choose the threshold that meets this with the fewest false rejects, and "
                     "keep it in <model_dir>/detector.json (audioclf listen and the streaming "
                     "export read it).", lower_bound=0, flag_values=flag_values)
  flags.DEFINE_list("keyword_snr_db", ["0", "20"], "audioclf evaluate --background: each "
                    "keyword clip placed at an SNR drawn uniformly from min,max (or at one "
                    "level), in dB: its RMS against the background's where it lies, as "
                    "--noise_snr_db mixes noise in training. Empty: at the clip's own level.",
                    flag_values=flag_values)
  flags.DEFINE_string("report_dir", None, "Where audioclf evaluate writes its report "
                      "(default <model_dir or saved_model>/eval_<split>).",
                      flag_values=flag_values)


def _define_export_flags(flag_values: flags.FlagValues) -> None:
  """audioclf export's own flags: where, in which format, and TFLite's quantization."""
  flags.DEFINE_string("export_dir", None, "Where audioclf export writes the SavedModel "
                      "(default <model_dir>/export).", flag_values=flag_values)
  flags.DEFINE_enum("format", "saved_model", ("saved_model", "tflite", "tflite_streaming"),
                    "What audioclf export writes: a SavedModel, TensorFlow Lite models "
                    "(default <model_dir>/tflite) checked against the Keras model, or a "
                    "speech_embedding model's streaming form (one 80 ms hop per call, its state "
                    "inside; default <model_dir>/tflite_streaming; --quantize default none and "
                    "dynamic).",
                    flag_values=flag_values)
  flags.DEFINE_multi_enum("quantize", ["none", "int8"], ("none", "dynamic", "int8"),
                          "--format=tflite: the variants to write, side by side: none (float), "
                          "dynamic (int8 weights), int8 (int8 weights and activations, "
                          "calibrated; the log-mel front end stays float).",
                          flag_values=flag_values)
  flags.DEFINE_integer("calibration_clips", 300, "--format=tflite: training clips int8 "
                       "quantization calibrates on.", flag_values=flag_values)


def _define_predict_flags(flag_values: flags.FlagValues) -> None:
  """audioclf predict's own flags: long files' segments, and what it writes besides."""
  flags.DEFINE_float("hop_seconds", None, "audioclf predict, files longer than a clip: the "
                     "step between sliding windows (default half a clip; 0.1 places word "
                     "onsets within 0.25 s).", flag_values=flag_values)
  flags.DEFINE_float("threshold", 0.5, "audioclf predict, long files: the probability a "
                     "label must reach to start a segment (audioclf.deploy.segments).",
                     flag_values=flag_values)
  flags.DEFINE_list("background_labels", ["_silence_", "_unknown_", "silence", "unknown"],
                    "audioclf predict, long files: labels never reported as segments.",
                    flag_values=flag_values)
  flags.DEFINE_string("output", None, "audioclf predict: also write every result to this "
                      ".csv or .json file.", flag_values=flag_values)
  flags.DEFINE_string("save_probabilities", None, "audioclf predict: also write every class's "
                      "probability per file of at most a clip to this .npz (what "
                      "audioclf migrate --report compares across stacks).",
                      flag_values=flag_values)


def _register_model_dir_validators(flag_values: flags.FlagValues) -> None:
  """The rules of the command flags that no Params field holds: checked when they are parsed.

  In one list, as absl reports the broken ones in the order they were registered.
  """
  for name, ok, rule in (("threshold", lambda v: 0 < v <= 1, "in (0, 1]"),
                         ("hop_seconds", lambda v: v is None or v > 0, "positive"),
                         ("calibration_clips", lambda v: v > 0, "positive"),
                         ("output", lambda v: v is None or v.endswith((".csv", ".json")),
                          "a .csv or .json file"),
                         ("save_probabilities", lambda v: v is None or v.endswith(".npz"),
                          "an .npz file")):
    flags.register_validator(name, ok, f"--{name} must be {rule}", flag_values=flag_values)


def define_migrate_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The Params flags (for --report's data), plus audioclf migrate's own. Idempotent."""
  define_model_dir_flags(flag_values)
  for name, help_ in (
      ("from_model_dir", "A model_dir the legacy stack (TensorFlow 2.15, Keras 2) wrote; with "
                         "--model, the model_dir of an Estimator a team's own code built with "
                         "model_to_estimator (--model names its builder)."),
      ("to_model_dir", "The new, empty model_dir for the current stack (Keras 3)."),
      ("mapping", "With --model: a .json of Keras 3 layer name -> \"layer_with_weights-<i>\" "
                  "(or null: left as built), where the builder's layers do not line up with "
                  "the checkpoint's (migrate then prints both sides); for a name-based "
                  "checkpoint, checkpoint variable (or regex) -> \"<layer>/<weight>\" (or null)."),
      ("estimator", "An Estimator of no Keras model (a model_fn's, a canned classifier's): the "
                    "module:function of the team's code returning it, given model_dir= (run on "
                    "the legacy stack for --report, and for a canned one's constructor "
                    "arguments, or the .json `audioclf.migration.legacy_estimator --describe` "
                    "wrote there)."),
      ("report_inputs", "--report, with --model: an .npz of the inputs to compare on, keyed by "
                        "the model's input name (or x_<name>); a raw-audio model with "
                        "--data_dir uses the --split's clips instead."),
      ("legacy_python", "--report: the legacy stack's Python, run for the legacy model's "
                        "probabilities (default $AUDIOCLF_LEGACY_PYTHON, else .venv-legacy)."),
      ("legacy_probabilities", "--report: the legacy model's probabilities, as "
                               "`audioclf predict --save_probabilities=` (with --model: "
                               "audioclf.migration.legacy_predict) wrote them on the legacy "
                               "stack, instead of running it.")):
    if name not in flag_values:
      flags.DEFINE_string(name, None, help_, flag_values=flag_values)
  if "carry_optimizer_state" not in flag_values:
    flags.DEFINE_bool("carry_optimizer_state", True, "Carry the optimizer's slots (Adam's, "
                      "RMSprop's averages); --nocarry_optimizer_state starts them fresh.",
                      flag_values=flag_values)
  if "report" not in flag_values:
    flags.DEFINE_bool("report", False, "Also compare the legacy and the migrated model on the "
                      "same held-out clips (--split): per-class accuracy and the largest "
                      "probability difference.", flag_values=flag_values)


def params_for_model_dir(flag_values: flags.FlagValues = flags.FLAGS,
                         model_dir: Optional[str] = None) -> Params:
  """A model_dir's params.json, with the flags given on the command line (or a flagfile) on top.

  So evaluate, predict and export run with the trained model's parameters by
  default, while --data_dir, --cache_dir or --batch_size can point elsewhere.
  With --saved_model instead, the params.json audioclf export writes beside it
  (or, for a SavedModel without one, the defaults) take its place.

  Args:
    flag_values: the parsed flags.
    model_dir: the model_dir to read; default --model_dir.
  """
  from audioclf.model import model_dir as model_dir_lib  # Keeps this module free of TensorFlow.

  saved_model = flag_values["saved_model"].value if "saved_model" in flag_values else None
  if saved_model and not flag_values["model_dir"].value:
    has_params = os.path.isfile(os.path.join(saved_model, model_dir_lib.PARAMS_FILE))
    saved = model_dir_lib.read_params(saved_model) if has_params else Params()
  else:
    saved = model_dir_lib.read_params(model_dir or flag_values["model_dir"].value)
  given = {f.name: flag_values[f.name].value for f in dataclasses.fields(Params)
           if f.name in flag_values and flag_values[f.name].present}
  return saved.replace(**given).validate()


def define_cache_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The Params flags, plus audioclf cache's own (what to do instead of filling). Idempotent."""
  define_flags(flag_values)
  if "verify" in flag_values:
    return
  flags.DEFINE_bool("info", False, "Print what is cached instead of filling it.",
                    flag_values=flag_values)
  flags.DEFINE_bool("verify", False, "Instead of filling, check every byte of every split and "
                    "entry under --cache_dir against their checksums, and each split's keys; "
                    "what is damaged is removed, to be filled again.", flag_values=flag_values)
  flags.DEFINE_float("prune_days", None, "Instead of filling, delete the splits and entries "
                     "of every dataset under --cache_dir that no run has used for this many "
                     "days.", lower_bound=0, flag_values=flag_values)


def define_service_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The Params flags (a worker's data), plus audioclf service's own. Idempotent."""
  define_flags(flag_values)
  if "dispatcher" in flag_values:
    return
  flags.DEFINE_integer("port", 0, "Port to listen on (0: any free one, printed).",
                       lower_bound=0, flag_values=flag_values)
  flags.DEFINE_string("dispatcher", None, "worker: the dispatcher's host:port.",
                      flag_values=flag_values)
  flags.DEFINE_string("worker_host", None, "worker: the name trainers reach this host by "
                      "(default: its host name).", flag_values=flag_values)
  flags.DEFINE_float("status_every_s", 60.0, "Seconds between status lines.", lower_bound=0.1,
                     flag_values=flag_values)
  flags.DEFINE_bool("allow_remote_clients", False, "Start the server although anyone who can "
                    "reach its port, from any host, can have the service's workers read any "
                    "file they can read: TensorFlow's tf.data service listens on every network "
                    "interface with no authentication. Required; use inside a private network "
                    "only.", flag_values=flag_values)


def define_launch_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """audioclf launch's own flags (the training flags go to its tasks, after --). Idempotent."""
  if "workers" in flag_values:
    return
  flags.DEFINE_integer("workers", 2, "Training tasks (the chief counts as one).", lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer("ps", 0, "Parameter server tasks (the Estimator's cluster); 0 for "
                       "Keras' MultiWorkerMirroredStrategy.", lower_bound=0,
                       flag_values=flag_values)
  flags.DEFINE_bool("evaluator", False, "Also run an evaluator task, which evaluates each "
                    "checkpoint as it appears (the Estimator engine).", flag_values=flag_values)
  flags.DEFINE_string("module", "audioclf.commands.train", "The module every task runs "
                      "(python -m <module> <the flags after -->).", flag_values=flag_values)


def define_synthesize_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """audioclf synthesize's flags: what to say, how often, by whom, and where. Idempotent.

  Their defaults are audioclf.synthesis.Settings'; no Params flag but --seed,
  which keeps its definition where a process defined the Params flags first.
  """
  if "per_word" in flag_values:
    return
  d = synthesis_settings.Settings()
  if "seed" not in flag_values:
    flags.DEFINE_integer("seed", d.seed, "The same seed and settings give the same bytes.",
                         flag_values=flag_values)
  flags.DEFINE_string("out", None, "The dataset's folder (required): created, or replaced where "
                      "synthesize wrote it before.", flag_values=flag_values)
  flags.DEFINE_list("words", list(d.words), "The words to say, each a class folder.",
                    flag_values=flag_values)
  flags.DEFINE_integer("per_word", d.per_word, "Clips per word (and of _unknown_).",
                       flag_values=flag_values)
  flags.DEFINE_integer("speakers", d.speakers, "Speakers (an espeak voice, rate and pitch each) "
                       "shared by every word: clip i is speaker i % speakers's.",
                       flag_values=flag_values)
  flags.DEFINE_list("unknown_words", [], "Also write _unknown_/: per_word clips of these words "
                    "spoken by the same speakers, or of N built-in words other than --words "
                    "(--unknown_words=20).", flag_values=flag_values)
  flags.DEFINE_bool("background_noise", d.background_noise, "Also write _background_noise_/: "
                    "noise colours, mains hum and babble.", flag_values=flag_values)
  flags.DEFINE_float("noise_seconds", d.noise_seconds, "--background_noise: each recording's "
                     "length.", flag_values=flag_values)
  flags.DEFINE_integer("held_out_speakers", d.held_out_speakers, "Also write _held_out/: this "
                       "many unseen speakers (voices, rates and pitches beyond the others') "
                       "saying every word, all listed as test clips.", flag_values=flag_values)
  flags.DEFINE_bool("force", False, "Write the dataset again even where --out holds it already.",
                    flag_values=flag_values)
  flags.DEFINE_bool("progress", True, "A progress bar on stderr.", flag_values=flag_values)


def define_listen_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """The model_dir flags, plus audioclf listen's own. Idempotent."""
  define_model_dir_flags(flag_values)
  if "input" in flag_values:
    return
  flags.DEFINE_string("input", None, "audioclf listen: a 16 kHz mono audio file, or - for raw "
                      "PCM16 mono at 16 kHz on stdin (arecord -f S16_LE -r 16000 -c 1).",
                      flag_values=flag_values)
  flags.DEFINE_bool("realtime", False, "audioclf listen, a file: deliver its hops at the pace "
                    "a microphone would (default: as fast as the model runs).",
                    flag_values=flag_values)
  flags.DEFINE_integer("smoothing_hops", None, "audioclf listen: hops (80 ms each) of the "
                       "moving average of each label's probability (default the model_dir's "
                       "detector.json, else 3).", lower_bound=1, flag_values=flag_values)
  flags.DEFINE_float("refractory_seconds", None, "audioclf listen: after a detection, seconds "
                     "before a label fires again (default the model's window).",
                     lower_bound=0, flag_values=flag_values)
  flags.DEFINE_enum("refractory_labels", "all", ("all", "each"), "audioclf listen: which "
                    "labels rest after a detection: all (a word's tail, still in the window, "
                    "can sound like another word) or each (only the one that fired).",
                    flag_values=flag_values)
