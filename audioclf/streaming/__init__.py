"""Streaming keyword spotting: a trained speech_embedding model run on 80 ms hops of a live stream.

  model.py       StreamingModel: the clip model hop by hop, each layer's past kept in state
  detector.py    smoothing, threshold and refractory period; the operating point in detector.json
  source.py      hops from a 16 kHz mono file (paced or not) or raw PCM16 on a pipe
  listen.py      the loop `audioclf listen` runs: hops in, detections out, a summary
  quality.py     false accepts per hour, false rejects, the DET curve, the chosen threshold
  background.py  `audioclf evaluate --background`: those measured on long recordings
  tflite.py      `audioclf export --format=tflite_streaming`: the step as TFLite, state inside
"""
