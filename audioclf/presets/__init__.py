"""audioclf's presets: absl flagfiles that ship inside the package (`--preset=NAME`).

The repository's `flags/` is this folder, so `--flagfile=flags/NAME.flags`
names the same file in a checkout; `--preset=NAME` finds it wherever audioclf
is installed. A preset includes another with `--preset=NAME`; flags after it
on the command line override it. Each file's header holds the command that
runs it and what it should reach.

  demo.flags                the demo: a small CNN on data/speech_words
  demo_12.flags             the demo as Speech Commands' 12-class task
  real_speech.flags         from scratch for real voices: speed and gain perturbation
  pretrained_speech.flags   Google's pretrained speech embedding and a small head
  smoke.flags               a seconds-long run that checks the wiring
  speech_commands.flags     Speech Commands v2, 35 words
  speech_commands_12.flags  Speech Commands v2, the 12-class task
  streaming_speech.flags    pretrained_speech trained for a stream: audioclf listen, the streaming export
  tune.flags                hyperparameter search on the demo data
"""
