"""The data: which files exist, decoding them once into the clip cache, and the input pipeline.

  manifest.py   which files exist, their labels and splits (folders or a CSV)
  decode.py     a file to samples by its format's decoder, and BadAudioError
  decoders/     the decoders by format (a file each), their names and versions in the cache key
  keys.py       what a file is: content fingerprints, remembered by stat on this host
  pcm.py        PCM16 samples: their dtype and their scale to float32
  cache_format.py  the cache's files and names, a split as opened, and the checks it passes
  store.py      Store: names, writes and opens the cache files of one set of decode parameters
  cache_maintenance.py  info, verify and prune: what the cache command does
  fill.py       filling a split (Fill), and fill(): every split ahead of time
  noise.py      background recordings, decoded once into the cache and mixed in
  rir.py        room impulse responses of --rir_dir, decoded once into the cache
  streams.py    named random streams: the key of every draw, from (seed, name, number)
  sampler.py    which clip comes when: pure functions of (seed, index); each batch's augmentations
  window.py     where a clip's window lies, how it is cut and labelled: one cut for every path
  augmentations/  the augmentations after the cache, a file each, and the order they run in
  pipeline.py   input_fn: make_for_train and make_for_inference, the assembly of the above
  batches.py    the warm and served reads of a cached split, and the batching every read shares
  cold.py       the cold pass: each file decoded as the first epoch reaches it, the split written
  recent.py     Recent: a bounded memo of the last values, by key (input_fn's built datasets)
  service.py    reading training batches from a tf.data service, and what its workers hold
  exit_guard.py ending a process with a pipeline that runs Python in it
  graph_errors.py  a bad file or a full cache met in the pipeline's Python, carried out as a value

`manifest`, `keys`, `pcm`, `decode`, `decoders`, `cache_format`, `store` and `cache_maintenance`
need no TensorFlow (a decoder's graph twin imports it when asked for).
"""
