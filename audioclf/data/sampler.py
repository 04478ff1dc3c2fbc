"""Which clip comes when, and every random draw: pure functions of (seed, global example index).

Training reads an endless stream of examples numbered g = 0, 1, 2, ...; batch
k holds examples k*B ... k*B + B - 1. Example g is in epoch g // n at
position g % n, and reads row `index_shuffle(g % n, (seed, epoch))` of the
split: a fresh permutation every epoch, computed per index as Grain's
samplers do (`tf.random.experimental.index_shuffle`), so nothing bigger than
a batch of numbers is ever held, and example g can be computed without
0 .. g-1. With --balanced_sampler, example g is of class g % C instead (C
the classes the split has, so every batch holds them evenly), and its row is
the next one of that class's own permutation, a new one each time the class
runs out: a pure function of (seed, g) too. The draws of batch k (each
window's offset and time shift; the augmentations: speed, pitch and tempo,
reverberation, noise, gain and mixup, `augment`) are keyed by (seed, k) and
the name of their stream (`stream_key`), so those of example g are a pure
function of (seed, g) for a given batch size, and no draw moves when
another augmentation is added or removed.
A batch is a pure function of (seeds, k, the cached clips and recordings):
the cold pass (which meets examples one by one, `example`), the warm cut (a
batch at a time, `batch`), a resume at step k and any parallelism give the
same bits.

Evaluation reads rows 0 .. n-1 in order and takes each clip's centre window,
as predict does (`window.center_start`). Its only noise is that of the _silence_
clips, drawn per evaluation batch from keys of their own: every evaluation
of a split sees the same silence clips.

These are TensorFlow ops on tensors of any shape, used by the pipeline, by
predict and by the benchmarks: the draws are written here and nowhere else.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.data import augment as augment_lib
from audioclf.data.recent import Recent
from audioclf.data import window as window_lib
from audioclf.params import Params

# Synthetic impulse responses in the bank: as many as a recorded set might
# hold, their spectra 115 KB each for 1 s clips at 16 kHz (15 MB in all).
SYNTHETIC_RESPONSES = 128


# White noise where there are no background recordings: its level only
# matters for _silence_ clips, whose gain is absolute (-20 dBFS at most).
WHITE_RMS = 0.1


class Sampler:
  """The order and draws of one training or evaluation stream over a split of `n` clips.

  With `shard` (index, count), the stream is one worker's share: of every
  epoch's permutation, the positions index, index + count, ... (so the shards
  of an epoch hold each file once between them); `epoch_size` is that share's
  size, and the draws are keyed apart per shard. (0, 1) is the whole split.

  `recordings` (noise.Recordings) are the background recordings to mix in,
  None for white noise; `silence_label` is the label id of the _silence_
  clips, which always get noise, at a gain drawn from [0, 1) of the
  recording's own level (as Speech Commands' recipe does), None without any.
  `labels` (each row's label id) are what the balanced sampler draws by,
  `num_classes` what mixup's soft labels span, and `rirs` (noise.Recordings
  from audioclf.data.rir) the impulse responses of reverberation, None for
  synthetic ones.

  Raises:
    ValueError: a shard out of range, or a balanced sampler without labels,
      or mixup without num_classes.
  """

  def __init__(self, params: Params, n: int, shard: Optional[tuple[int, int]] = None,
               recordings=None, silence_label: Optional[int] = None, *,
               labels: Optional[np.ndarray] = None, num_classes: Optional[int] = None,
               rirs=None):
    index, count = self.shard = tuple(shard or (0, 1))
    if not 0 <= index < count:
      raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard}")
    self.n, self.batch_size = n, params.batch_size
    self.epoch_size = len(range(index, n, count))
    self.clip_samples = params.clip_samples
    self.shift = int(round(params.time_shift_seconds * params.sample_rate))
    seed = params.shuffle_seed
    # No shuffle seed: another order every run, as asked; the draws stay keyed by params.seed.
    self.order_seed = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
    self.seed = int(params.seed)
    self.params = params  # Its augmentations' fields, read by their Params names.
    self.recordings, self.silence_label, self.rirs = recordings, silence_label, rirs
    self._spectra = None  # The impulse responses' spectra, made at first use (`_responses`).
    self.num_classes = num_classes
    if params.mixup_alpha and not num_classes:
      raise ValueError("mixup needs num_classes: its labels are soft, one value per class")
    self.classes = None
    if params.balanced_sampler:
      if labels is None:
        raise ValueError("a balanced sampler needs each row's label")
      self.classes = class_table(labels)

  def mixes(self, training: bool) -> bool:
    """Whether batches of this stream get noise (`add_noise`) at all."""
    return (training and self.params.noise_prob > 0) or self.silence_label is not None

  def mapped(self) -> "Sampler":
    """This sampler for a graph that runs on another host (a tf.data service worker's).

    Its background recordings are mapped there from that host's cache
    (`noise.Recordings.mapped`) instead of travelling in the graph; the
    response bank's spectra, made once here, travel in it.
    """
    out = copy.copy(self)
    out.recordings = None if self.recordings is None else self.recordings.mapped()
    return out

  def augments(self, training: bool) -> bool:
    """Whether `augment` changes batches of this stream at all (else it need not run)."""
    return self.mixes(training) or (training and (
        self._voice_on() or self.params.reverb_prob > 0 or self.params.gain_db != (0.0, 0.0)
        or self.params.mixup_alpha > 0))

  def batch(self, k) -> tuple[tf.Tensor, tf.Tensor]:
    """Training batch k: (its split rows int64 [B], u float64 [B] uniform in [0, 1)).

    `u` picks each window's start once the clip's length is known
    (`start`): the cold pass knows it only after decoding.
    """
    return self._batch_fn(tf.cast(k, tf.int64))

  @functools.cached_property
  def _batch_fn(self):
    # Traced once per order and process (`_TRACED_BATCHES`): a cold pass draws
    # in two places (its own batches, then those of the split it wrote), and
    # input_fn builds the same stream again and again (evaluation, trials).
    key = (self.n, self.batch_size, self.epoch_size, self.shard, self.order_seed, self.seed,
           None if self.classes is None else tuple(a.tobytes() for a in self.classes))
    fn = _TRACED_BATCHES.get(key)
    if fn is None:
      numbers = copy.copy(self)  # What `_batch` reads, without the recordings' samples.
      numbers.recordings = numbers.rirs = None
      fn = tf.function(numbers._batch, input_signature=[tf.TensorSpec([], tf.int64)],
                       autograph=False)
      _TRACED_BATCHES.put(key, fn)
    return fn

  def _batch(self, k: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    g = k * self.batch_size + tf.range(self.batch_size, dtype=tf.int64)
    if self.classes is not None:
      return self._balanced_row(g), self._uniform(k)
    epoch = g // self.epoch_size
    # A batch no larger than an epoch spans at most two of them.
    rows = tf.where(tf.equal(epoch, epoch[0]), self._row(g, epoch[0]), self._row(g, epoch[0] + 1))
    return rows, self._uniform(k)

  def example(self, g) -> tuple[tf.Tensor, tf.Tensor]:
    """Training example g alone (a scalar): what `batch(g // B)` gives it, bit for bit."""
    g = tf.cast(g, tf.int64)
    row = self._balanced_row(g) if self.classes is not None else self._row(g, g // self.epoch_size)
    return row, self._uniform(g // self.batch_size)[g % self.batch_size]

  def eval_rows(self) -> range:
    """Evaluation's rows, in order: this shard's share."""
    index, count = self.shard
    return range(index, self.n, count)

  def _row(self, g, epoch):
    index, count = self.shard
    position = index + (g % self.epoch_size) * count  # In the whole epoch's permutation.
    return tf.random.experimental.index_shuffle(
        position, tf.stack([tf.constant(self.order_seed, tf.int64), epoch]), self.n - 1)

  def _balanced_row(self, g):
    """The row of example(s) g of the balanced stream: class g % C, that class's next clip.

    Of a shard (index, count), example g is its class's occurrence
    (g // C) * count + index: the shards share each class's permutations.
    """
    rows, starts, sizes = (tf.constant(a, tf.int64) for a in self.classes)
    classes = len(self.classes[2])
    index, count = self.shard
    slot = g % classes
    occurrence = (g // classes) * count + index
    size = tf.gather(sizes, slot)
    # One permutation per (seed, class, round through the class). The raw op:
    # index_shuffle's wrapper pads a batch of seeds [n, 2] along the wrong
    # axis (TF 2.15 and 2.21), and the op takes all three numbers anyway.
    seed = tf.stack([tf.fill(tf.shape(g), tf.constant(self.order_seed, tf.int64)), slot,
                     occurrence // size], axis=-1)
    position = tf.raw_ops.RandomIndexShuffle(index=occurrence % size, seed=seed,
                                             max_index=size - 1, rounds=4)
    return tf.gather(rows, tf.gather(starts, slot) + position)

  def _uniform(self, k):
    return tf.random.stateless_uniform([self.batch_size], self._key("window", k),
                                       dtype=tf.float64)

  def start(self, u, length):
    """Where windows of clips of `length` start: drawn by `u` in training, or (u None) centred."""
    return window_lib.start(u, length, self.clip_samples, self.shift)

  def decoded_window(self, samples: tf.Tensor, u=None) -> tuple[tf.Tensor, tf.Tensor]:
    """(window, length) of a decoded clip: at `start(u, ...)`, or without u its centre."""
    return window_lib.decoded(samples, u, self.clip_samples, self.shift)

  def add_noise(self, waves: tf.Tensor, labels: tf.Tensor, k, training: bool = True) -> tf.Tensor:
    """Noise under the examples of batch k ([batch, clip_samples] float32; labels [batch]).

    Training: each example, with chance noise_prob, gets an excerpt of a
    background recording (or white noise) at a signal-to-noise ratio drawn
    uniformly from noise_snr_db, against the recording's level; a _silence_
    clip always gets one, at a gain drawn from [0, 1). Evaluation: only the
    _silence_ clips.
    """
    return augment_lib.apply(waves, labels, [self._noise(waves, labels, k, training)])[0]

  def _noise(self, waves, labels, k, training: bool) -> augment_lib.Step:
    """`add_noise`'s draws, as the step that adds the noise."""
    k = tf.cast(k, tf.int64)
    size = tf.shape(waves)[:1]
    stream = "noise" if training else "silence"  # Evaluation draws apart from training's.
    pick, level, which, where, gain = tf.unstack(tf.random.stateless_uniform(
        tf.concat([[5], size], 0), self._key(stream, k), dtype=tf.float64))
    silence = (tf.equal(labels, self.silence_label) if self.silence_label is not None
               else tf.zeros(size, tf.bool))
    chosen = (silence | (pick < self.params.noise_prob)) if training else silence
    low, high = self.params.noise_snr_db
    snr_db = tf.cast(low + level * (high - low), tf.float32)
    # The level of the recording, not of the excerpt: a quiet passage stays quiet.
    noise_rms = WHITE_RMS if self.recordings is None else self.recordings.rms(which)
    # A _silence_ clip's noise at its gain; any other's at its SNR against the example's RMS.
    absolute = tf.where(silence, tf.cast(gain, tf.float32), 0.0)
    relative = tf.where(silence, 0.0, 1.0 / (noise_rms * 10.0 ** (snr_db / 20.0)))
    if self.recordings is not None:
      return self.recordings.add_step(chosen, which, where, absolute, relative, waves.shape[-1])
    noise = WHITE_RMS * tf.random.stateless_normal(tf.shape(waves),
                                                   self._key(stream + "/white", k))
    return augment_lib.noise_step(noise, chosen, absolute, relative)

  def augment(self, waves: tf.Tensor, labels: tf.Tensor, k, training: bool = True,
              scale: Optional[float] = None):
    """Batch k's augmentations ([batch, clip_samples] float32; labels [batch]): (waves, labels).

    In the order sound reaches a microphone: the voice (`_voice_and_room`:
    pitch and tempo, the room's reverberation, then the recording's speed),
    the background (`add_noise`, at an SNR against the reverberant voice),
    the level (gain, after the noise so its SNR holds), then mixup, which
    mixes finished examples and their labels (soft labels). Evaluation gets
    only the noise of _silence_ clips. An augmentation that is off adds no
    op to the graph. Every draw is taken first; the augmentations then run
    as one program (`augment.apply`). With `scale`, `waves` are int16
    samples that the program first turns into float32 (times scale).
    """
    steps = [] if scale is None else [augment_lib.scale_step(scale)]
    return augment_lib.apply(waves, labels, steps + self.steps(waves, labels, k, training))

  def steps(self, waves: tf.Tensor, labels: tf.Tensor, k,
            training: bool = True) -> list[augment_lib.Step]:
    """Batch k's augmentations as `augment.Step`s, every draw taken, in `augment`'s order."""
    k = tf.cast(k, tf.int64)
    steps = self._voice_and_room(waves, k) if training else []
    if self.mixes(training):
      steps.append(self._noise(waves, labels, k, training))
    if training:
      steps += self._gain(waves, k) + self._mixup(waves, k)
    return steps

  def _voice_on(self) -> bool:
    return self.params.speed_perturb != (1.0, 1.0) or self._vocoder_on()

  def _vocoder_on(self) -> bool:
    p = self.params
    return p.pitch_shift_semitones != (0.0, 0.0) or p.tempo_perturb != (1.0, 1.0)

  def _draws(self, name: str, k, rows: int, size) -> list[tf.Tensor]:
    """`rows` draws per example of batch k, each [batch] uniform in [0, 1), from stream `name`."""
    return tf.unstack(tf.random.stateless_uniform(tf.concat([[rows], size], 0),
                                                  self._key(name, k)), num=rows)

  def _voice_and_room(self, waves, k) -> list:
    """The steps of pitch and tempo apart (a vocoder), reverberation, then speed (resampling).

    The resampling comes last, as speed perturbation of a recording (its
    room included, as Kaldi's speed perturbation of recorded audio): where it
    speeds an example up, its low-pass rides on the FFTs of the vocoder or of
    the reverberation, whichever the example went through; only examples
    with neither take a low-pass of their own (`augment.resample`).
    """
    voice, factors, band_limited = self._voice(waves, k)
    room, reverberated = self._reverb(waves, k, factors)
    if factors is None:
      return voice + room
    if reverberated is not None:
      band_limited = reverberated if band_limited is None else band_limited | reverberated
    return voice + room + [augment_lib.resample_step(factors, band_limited)]

  def _voice(self, waves, k) -> tuple:
    """The vocoder's steps, the resampling's factors and the examples the vocoder band-limited.

    One stretch and one resampling: stretched by tempo / pitch (the tempo
    moves, the pitch stays), then resampled by speed x pitch, an example's
    tempo moves by speed x tempo and its pitch by speed x pitch. Only the
    examples chosen for the vocoder (pitch_tempo_prob) go through it; the
    others take pitch and tempo 1. The factors are None where nothing is
    resampled, the band-limited examples None where none is.
    """
    if not self._voice_on():
      return [], None, None
    size = tf.shape(waves)[:1]
    speed, semitones, tempo, pick = (self._draws(name, k, 1, size)[0]
                                     for name in ("speed", "pitch", "tempo", "vocoder"))
    pitch = 2.0 ** (_between(self.params.pitch_shift_semitones, semitones) / 12.0)
    if not self._vocoder_on():
      return [], _between(self.params.speed_perturb, speed) * pitch, None
    chosen = pick < self.params.pitch_tempo_prob
    pitch = tf.where(chosen, pitch, 1.0)
    factors = _between(self.params.speed_perturb, speed) * pitch
    # The resampling's low-pass of these examples is the vocoder's, on its own spectra.
    steps = [augment_lib.stretch_step(_between(self.params.tempo_perturb, tempo) / pitch,
                                      augment_lib.vocoder_frame(self.params.sample_rate), chosen,
                                      1.0 / factors)]
    if (self.params.speed_perturb, self.params.pitch_shift_semitones) == ((1.0, 1.0), (0.0, 0.0)):
      return steps, None, None
    return steps, factors, chosen

  def _reverb(self, waves, k, factors=None) -> tuple:
    """Reverberation's steps and the examples it convolves (None: reverberation is off).

    With chance reverb_prob, an example convolved with a bank's response;
    only the chosen examples are (the FFTs are most of the cost). With the
    resampling's `factors`, their low-pass too (cutoff 1 / factor).
    """
    if not self.params.reverb_prob:
      return [], None
    pick, which = self._draws("reverb", k, 2, tf.shape(waves)[:1])
    spectra = self._responses()
    count = spectra.shape[0]
    which = tf.minimum(tf.cast(which * count, tf.int32), count - 1)
    chosen = pick < self.params.reverb_prob
    cutoff = None if factors is None else 1.0 / factors
    return [augment_lib.reverberate_step(spectra, which, chosen, cutoff)], chosen

  def _responses(self) -> tf.Tensor:
    """The bank's spectra (augment.response_spectra), made once, outside any batch's graph.

    Recorded responses (`rirs`) from their direct path on, each at most a
    clip long; else SYNTHETIC_RESPONSES drawn from the seed, their RT60s
    spread evenly over reverb_rt60, each tail uniform noise of unit variance
    (a third of the time of Gaussian noise, and as diffuse once it is
    convolved), all as long as the longest needs to fall 60 dB below its
    direct path (augment.synthetic_taps: 6472 taps for 0.8 s at 16 kHz,
    where the whole RT60 would take 12800, so FFTs of 22500 samples instead
    of 28800). init_scope lifts the work out of the tf.data function
    that first asks: it runs once, eagerly (or in the caller's graph).
    """
    if self._spectra is None:
      with tf.init_scope():
        self._spectra = augment_lib.response_spectra(self._bank(), self.clip_samples)
    return self._spectra

  def _bank(self) -> tf.Tensor:
    if self.rirs is not None:
      count = self.rirs.count
      which = (tf.range(count, dtype=tf.float32) + 0.5) / count
      return self.rirs.excerpts(which, tf.zeros_like(which), self.rirs.longest)
    taps = augment_lib.synthetic_taps(max(self.params.reverb_rt60), self.params.sample_rate,
                                      self.clip_samples)
    count, root3 = SYNTHETIC_RESPONSES, 3.0 ** 0.5
    # One bank for every shard: keyed by the seed alone.
    spread = tf.random.stateless_uniform([count], stream_key(self.seed, "responses/rt60", 0))
    noise = tf.random.stateless_uniform([count, taps], stream_key(self.seed, "responses/tail", 0),
                                        -root3, root3)
    rt60 = _between(self.params.reverb_rt60, (tf.range(count, dtype=tf.float32) + spread) / count)
    return augment_lib.synthetic_rirs(noise, rt60, self.params.sample_rate)

  def _gain(self, waves, k):
    if self.params.gain_db == (0.0, 0.0):
      return []
    db = _between(self.params.gain_db, self._draws("gain", k, 1, tf.shape(waves)[:1])[0])
    return [augment_lib.gain_step(db)]

  def _mixup(self, waves, k):
    """Each example mixed with a partner of its batch (a drawn permutation), by Beta(a, a)."""
    if not self.params.mixup_alpha:
      return []
    size = tf.shape(waves)[:1]
    partners = tf.argsort(self._draws("mixup", k, 1, size)[0])
    # Beta(a, a) as the ratio of two Gamma(a) draws: one op each, keyed like every draw.
    a, b = (tf.random.stateless_gamma(size, self._key(name, k), alpha=self.params.mixup_alpha)
            for name in ("mixup/a", "mixup/b"))
    weights = tf.math.divide_no_nan(a, a + b)
    return [augment_lib.mixup_step(partners, weights, self.num_classes)]

  def _key(self, name: str, k: tf.Tensor) -> tf.Tensor:
    """The key of stream `name`'s draws for batch k: shards' batches interleave, never meet."""
    index, count = self.shard
    return stream_key(self.seed, name, k * count + index)


def stream_id(seed: int, name: str) -> int:
  """A stable signed 64-bit hash of (seed, stream name): the first half of the stream's keys."""
  digest = hashlib.blake2b(f"{int(seed)}\0{name}".encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(digest, "little", signed=True)


def stream_key(seed: int, name: str, at) -> tf.Tensor:
  """The stateless key int64 [2] of draw `at` of stream `name`: (stream_id, at).

  A stream's draws depend on its name, the seed and `at` alone, so adding or
  removing another augmentation leaves them as they were.
  """
  return tf.stack([tf.constant(stream_id(seed, name), tf.int64), tf.cast(at, tf.int64)])


# `Sampler.batch`, traced, by the numbers it depends on: a process keeps a few.
_TRACED_BATCHES = Recent(size=16)


def _between(bounds: tuple[float, float], u: tf.Tensor) -> tf.Tensor:
  """u in [0, 1) mapped uniformly onto [low, high]."""
  low, high = bounds
  return low + u * (high - low)


def class_table(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(rows grouped by class, each class's first position in them, its size), classes present only."""
  labels = np.asarray(labels)
  order = np.argsort(labels, kind="stable")
  order = order[labels[order] >= 0]
  _, sizes = np.unique(labels[order], return_counts=True)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  return order.astype(np.int64), starts.astype(np.int64), sizes.astype(np.int64)

