"""Reverberation: with chance reverb_prob an example convolved with a response of a bank, by FFT.

The bank is recorded responses (--rir_dir, audioclf.data.rir) from their
direct path on, each at most a clip long; else SYNTHETIC_RESPONSES drawn
from the seed, their RT60s spread evenly over reverb_rt60. Its spectra are
made once, not per batch. Only the chosen examples are convolved (the FFTs
are most of the cost); where the voice's resampling follows, their low-pass
rides on these FFTs (cutoff 1 / factor).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import tensorflow as tf

from audioclf.data.augmentations.base import Augmentation, Batch, Sources, between
from audioclf.data.augmentations.program import Step, apply, on_rows
from audioclf.data.augmentations.spectra import fft_size, passband, rms, spectrum_rms
from audioclf.data.streams import stream_key
from audioclf.params import Params

# Synthetic impulse responses in the bank: as many as a recorded set might
# hold, their spectra 115 KB each for 1 s clips at 16 kHz (15 MB in all).
SYNTHETIC_RESPONSES = 128
# 60 dB of decay is a factor 1000 in amplitude: exp(-ln(1000) t / RT60).
_LN_1000 = math.log(1000.0)


class Reverb(Augmentation):
  """--reverb_prob of examples convolved with a response of --rir_dir, else of --reverb_rt60."""
  name = "reverb"
  fields = ("reverb_prob", "rir_dir", "reverb_rt60")
  streams = ("reverb", "responses/rt60", "responses/tail")

  def __init__(self, params: Params, sources: Sources):
    super().__init__(params, sources)
    self._spectra = None  # The bank's spectra, made at first use (`spectra`).

  def on(self, training: bool) -> bool:
    return training and self.params.reverb_prob > 0

  def draw(self, batch: Batch) -> tuple[tf.Tensor, tf.Tensor]:
    """(the examples chosen, which response each takes)."""
    pick, which = batch.uniform("reverb", 2)
    count = self.spectra().shape[0]
    which = tf.minimum(tf.cast(which * count, tf.int32), count - 1)
    return pick < self.params.reverb_prob, which

  def steps(self, batch: Batch, draws: tuple[tf.Tensor, tf.Tensor]) -> list[Step]:
    chosen, which = draws
    cutoff = None
    if batch.factors is not None:
      cutoff = 1.0 / batch.factors
      batch.band_limit(chosen)
    return [reverberate_step(self.spectra(), which, chosen, cutoff)]

  def spectra(self) -> tf.Tensor:
    """The bank's spectra (`response_spectra`), made once, outside any batch's graph.

    Synthetic responses are as long as the longest needs to fall 60 dB
    below its direct path (`synthetic_taps`), each tail uniform noise of
    unit variance (a third of the time of Gaussian noise, and as diffuse
    once it is convolved). init_scope lifts the work out of the tf.data
    function that first asks: it runs once, eagerly (or in the caller's graph).
    """
    if self._spectra is None:
      with tf.init_scope():
        self._spectra = response_spectra(self._bank(), self.params.clip_samples)
    return self._spectra

  def _bank(self) -> tf.Tensor:
    rirs, p = self.sources.rirs, self.params
    if rirs is not None:
      count = rirs.count
      which = (tf.range(count, dtype=tf.float32) + 0.5) / count
      return rirs.excerpts(which, tf.zeros_like(which), rirs.longest)
    taps = synthetic_taps(max(p.reverb_rt60), p.sample_rate, p.clip_samples)
    count, root3 = SYNTHETIC_RESPONSES, 3.0 ** 0.5
    # One bank for every shard: keyed by the seed alone.
    spread = tf.random.stateless_uniform([count], stream_key(p.seed, "responses/rt60", 0))
    noise = tf.random.stateless_uniform([count, taps], stream_key(p.seed, "responses/tail", 0),
                                        -root3, root3)
    rt60 = between(p.reverb_rt60, (tf.range(count, dtype=tf.float32) + spread) / count)
    return synthetic_rirs(noise, rt60, p.sample_rate)


def response_spectra(rirs: tf.Tensor, n: int) -> tf.Tensor:
  """The spectra `reverberate` convolves clips of `n` samples with: of impulse responses [count, taps].

  Computed once for a bank of responses (`Reverb.spectra`), not per batch: an
  FFT per response saved on every example reverberated.
  """
  return tf.signal.rfft(rirs, [fft_size(n + rirs.shape[-1] - 1)])


def reverberate(waves: tf.Tensor, spectra: tf.Tensor, which: Optional[tf.Tensor] = None,
                chosen: Optional[tf.Tensor] = None, cutoff: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Each example convolved with an impulse response: row `which` of `spectra` (`response_spectra`).

  Linear convolution by FFT (rfft, product, irfft over at least samples +
  taps - 1, so nothing wraps), cut to the clip and brought back to the
  clip's level: reverberation changes the sound, not how loud it is, and the
  noise mixed in next keeps its signal-to-noise ratio. `which` (int
  [batch]) defaults to row i for example i; only the `chosen` examples
  (bool [batch]; all by default) are convolved. With `cutoff` ([batch], a
  fraction of Nyquist, as `low_pass`'s), the frequencies above it are left
  out too: the low-pass of a resampling that follows, without an FFT of its own.
  """
  batch = tf.shape(waves)[:1]
  which = tf.range(batch[0]) if which is None else which
  chosen = tf.ones(batch, tf.bool) if chosen is None else chosen
  return apply(waves, None, [reverberate_step(spectra, which, chosen, cutoff)])[0]


def reverberate_step(spectra: tf.Tensor, which: tf.Tensor, chosen: tf.Tensor,
                     cutoff: Optional[tf.Tensor] = None) -> Step:
  """`reverberate` of the `chosen` examples as a Step."""
  cutoff = None if cutoff is None else tf.cast(cutoff, tf.float32)
  return Step(_reverberate_rows, (chosen, spectra, which, cutoff))


def _reverberate_rows(waves, chosen, spectra, which, cutoff):
  n, size = waves.shape[-1], 2 * (spectra.shape[-1] - 1)

  def convolve(rows, responses, *cut):
    dry = tf.signal.rfft(rows, [size])
    if cut:  # Without a cutoff (no resampling follows), no mask.
      dry *= tf.cast(passband(cut[0], size), tf.complex64)
    wet = tf.signal.irfft(dry * tf.gather(spectra, responses), [size])[:, :n]
    # The level of the dry clip as its low-pass leaves it: what the wet one is brought back to.
    return wet * (spectrum_rms(dry, n) / tf.maximum(rms(wet), 1e-9))

  return on_rows(convolve, waves, chosen, which, *(() if cutoff is None else (cutoff,)))


def synthetic_rirs(noise: tf.Tensor, rt60_seconds: tf.Tensor, sample_rate: int) -> tf.Tensor:
  """Impulse responses [batch, taps] from white `noise` [batch, taps] and RT60s [batch].

  A direct path (1 at tap 0) and a diffuse tail: the noise under an
  exponential envelope that falls 60 dB in rt60 seconds, scaled to the
  direct path's energy (a direct-to-reverberant ratio of 0 dB: a talker a
  metre or two away in a room).
  """
  taps = noise.shape[-1]
  t = tf.range(taps, dtype=tf.float32)[None, :] / sample_rate
  envelope = tf.exp(-_LN_1000 * t / tf.cast(rt60_seconds, tf.float32)[:, None])
  tail = noise * envelope * tf.cast(t > 0, tf.float32)
  tail /= tf.maximum(tf.norm(tail, axis=-1, keepdims=True), 1e-9)
  return tail + tf.one_hot(tf.zeros(tf.shape(noise)[:1], tf.int32), taps)


def synthetic_taps(rt60_seconds: float, sample_rate: int, most: int) -> int:
  """The taps of a synthetic response (at most `most`): until its tail's envelope is 60 dB below the direct path.

  The tail (`synthetic_rirs`) holds the direct path's energy spread over its
  decay, so it starts well below it (-30 dB for an RT60 of 0.8 s at 16 kHz)
  and falls 60 dB below the direct path about half an RT60 in (0.40 s of
  0.8): what follows would add less than a thousandth of the direct path's
  amplitude, and only lengthen every reverberation's FFTs (`response_spectra`).
  """
  taps = max(1, min(int(most), int(np.ceil(rt60_seconds * sample_rate))))
  envelope = np.exp(-_LN_1000 * np.arange(1, taps) / (rt60_seconds * sample_rate))
  level = envelope / max(float(np.sqrt(np.sum(envelope ** 2))), 1e-30)  # Unit-variance noise.
  below = np.flatnonzero(level <= 1e-3)  # below[0] is tap below[0] + 1.
  return int(below[0]) + 1 if len(below) else taps


