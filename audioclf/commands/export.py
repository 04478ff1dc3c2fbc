"""audioclf export: a model_dir as a SavedModel, or as TensorFlow Lite models checked against it.

  python -m audioclf export --model_dir=runs/demo/current/keras [--export_dir=...]
  python -m audioclf export --model_dir=runs/demo/current/keras --format=tflite [--quantize=int8]
  python -m audioclf export --model_dir=runs/demo/current/pretrained --format=tflite_streaming

The first two take raw audio: float32 waveforms [batch, clip_samples] at sample_rate
(audioclf.deploy.export, audioclf.deploy.tflite), from the best checkpoint
where the run kept one (--checkpoint=last for the latest). Prints one line of
JSON last, with the checkpoint used and its step. The streaming form takes one
hop of 1280 samples at 16 kHz per call (audioclf.streaming.tflite).
"""

from __future__ import annotations

from typing import Optional, Sequence

from absl import flags

from audioclf.commands import cli
from audioclf.commands import flags as command_flags
from audioclf.commands import quiet

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  # pylint: disable=g-import-not-at-top
  # Here, not at the top: `--help` needs none of it, and cli.run has started
  # TensorFlow quietly by now.
  from audioclf.deploy import export as export_lib
  from audioclf.deploy import tflite
  from audioclf.model import model_dir
  # pylint: enable=g-import-not-at-top
  params = command_flags.params_for_model_dir()
  chosen = model_dir.choose_checkpoint(FLAGS.model_dir, FLAGS.checkpoint)
  if FLAGS.format == "tflite_streaming":
    from audioclf.streaming import tflite as streaming_tflite  # pylint: disable=g-import-not-at-top
    quantize = FLAGS.quantize if FLAGS["quantize"].present else ["none", "dynamic"]
    with quiet.chatter_dropped(argv):  # TFLite's C++ lines.
      result = streaming_tflite.export(FLAGS.model_dir, FLAGS.export_dir, quantize, chosen.path,
                                       FLAGS.calibration_clips)
    result = {"model_dir": FLAGS.model_dir, **chosen.record(), **result}
  elif FLAGS.format == "tflite":
    with quiet.chatter_dropped(argv):  # TFLite's C++ lines.
      result = tflite.export(FLAGS.model_dir, FLAGS.export_dir, params, FLAGS.quantize,
                             FLAGS.calibration_clips, checkpoint=chosen.path)
    print(tflite.table(result), flush=True)
  else:
    path = export_lib.export(FLAGS.model_dir, FLAGS.export_dir, params, chosen.path)
    result = {"model_dir": FLAGS.model_dir, **chosen.record(), "export_dir": path}
  print(model_dir.summary_line(result), flush=True)


def run(argv: Optional[Sequence[str]] = None) -> None:
  command_flags.define_model_dir_flags()
  flags.mark_flag_as_required("model_dir")
  cli.run(main, argv, __doc__)


if __name__ == "__main__":
  run()
