"""After training: evaluation and its report, predictions on files and long recordings, export.

  evaluate.py   a model_dir or SavedModel on one split
  report.py     the evaluation report: per-class metrics, confusion, errors, accuracy per group
  predict.py    labels and probabilities for audio files
  segments.py   long recordings: streamed sliding windows and the segment rule
  export.py     the SavedModel (raw waveforms in, probabilities and labels out)
  tflite.py     TensorFlow Lite conversion, int8 calibration and the self-check
"""
