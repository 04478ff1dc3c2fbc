"""Google's pretrained speech embedding (Lin et al., ICASSP 2020) as Keras layers.

  shipped.py  the TensorFlow Lite files in the pyopen-wakeword wheel: found, checked, read
  layers.py   SpeechMel (raw audio -> log-mel frames), SpeechEmbedding (frames -> embeddings)
"""
