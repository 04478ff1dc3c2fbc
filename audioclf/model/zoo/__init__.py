"""audioclf's built-in models, each a body in a file of its own.

Each is registered by name as an entry point (pyproject.toml, group
"audioclf.models"), exactly as a user's package registers its own, and found
through audioclf.model.registry like any other:

  cnn.py          a small VGG-style CNN (the demo's)
  ds_cnn.py       DS-CNN, Zhang et al. 2017 ("Hello Edge")
  bc_resnet.py    BC-ResNet, Kim et al. 2021
  matchboxnet.py  MatchboxNet, Majumdar and Ginsburg 2020

The table of their sizes, costs and accuracies is docs/models.md.
"""
