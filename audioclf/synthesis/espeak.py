"""espeak-ng through ctypes, one fresh process per word: `say` runs it, `main` is that process.

espeak-ng is the library bundled in the `espeakng-loader` wheel (no system
package, no espeak binary). `python -m audioclf.synthesis.espeak` reads
{"word", "jobs"} as JSON on stdin and writes a JSON header line, then every
job's take of the word as raw int16 samples, on stdout.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import numpy as np

from audioclf.synthesis.settings import MAX_WORD_SECONDS, MISSING_ESPEAK, SynthesisError

# Faster than this is no longer intelligible speech; a word that still does not fit is refused.
MAX_RATE_WPM = 700
# Values from espeak-ng's speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000
_CHARS_UTF8 = 1
_POS_CHARACTER = 1
_PARAM_RATE, _PARAM_PITCH, _PARAM_RANGE = 1, 3, 4
_FAILED = 3  # The worker's exit status for a failure it explains in its last stderr line.
# The folder that holds the audioclf package, for the worker's imports.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def say(word: str, jobs: list[list]) -> tuple[dict, list[np.ndarray]]:
  """Every job's take of `word`: ({"sample_rate", "espeak", "lengths"}, int16 arrays).

  espeak-ng keeps synthesis state between utterances (the same text comes out a few samples
  different each call, depending on what was spoken before, and re-initializing does not
  reset it), so a fresh process per word is what makes a word's clips depend only on the
  settings, not on what else this process synthesized earlier.

  Args:
    word: the text to say.
    jobs: [voice, words per minute, pitch, pitch range, noise seed] per take.

  Raises:
    SynthesisError: espeak-ng cannot say it, or the worker died.
  """
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
  proc = subprocess.run([sys.executable, "-m", __name__],
                        input=json.dumps({"word": word, "jobs": jobs}).encode(),
                        capture_output=True, check=False, env=env)
  if proc.returncode != 0:
    msg = proc.stderr.decode(errors="replace").strip()
    if proc.returncode == _FAILED and msg:
      raise SynthesisError(msg.splitlines()[-1])
    raise SynthesisError(
        f"espeak worker for {word!r} died (exit {proc.returncode}): {msg[-2000:]}")
  head, _, body = proc.stdout.partition(b"\n")
  header = json.loads(head)
  audio = np.frombuffer(body, dtype=np.int16)
  bounds = np.cumsum([0] + header["lengths"])
  return header, [audio[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def main() -> int:
  """Synthesizes the jobs read from stdin; writes a JSON header line plus raw int16 audio."""
  req = json.load(sys.stdin)
  word = req["word"]
  try:
    import espeakng_loader  # pylint: disable=g-import-not-at-top
  except ImportError:
    return _fail(MISSING_ESPEAK)

  lib, set_seed = _library(espeakng_loader.get_library_path())
  # DONT_EXIT: without it a bad data path makes espeak call exit() inside this process.
  sample_rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0,
                                      espeakng_loader.get_data_path().encode(),
                                      _INITIALIZE_DONT_EXIT)
  if sample_rate <= 0:
    return _fail(f"espeak-ng failed to initialize (data in {espeakng_loader.get_data_path()}); "
                 "reinstall espeakng-loader")
  speaker = _WordSpeaker(lib, set_seed, sample_rate, word)
  lengths, out = [], []
  try:
    for voice, wpm, pitch, prange, noise_seed in req["jobs"]:
      audio = speaker.say_in_a_clip(voice, wpm, pitch, prange, noise_seed)
      lengths.append(len(audio))
      out.append(audio.tobytes())
  except ValueError as e:
    return _fail(f"cannot synthesize {word!r} ({voice}): {e}")
  header = {"sample_rate": sample_rate, "espeak": lib.espeak_Info(None).decode(),
            "lengths": lengths}
  sys.stdout.buffer.write(json.dumps(header).encode() + b"\n")
  sys.stdout.buffer.write(b"".join(out))
  sys.stdout.buffer.flush()
  return 0


def _library(path: str):
  """espeak-ng's shared library at path, its functions typed; and espeak_ng_SetRandSeed, or None."""
  lib = ctypes.CDLL(path)
  lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
  lib.espeak_Initialize.restype = ctypes.c_int
  lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
  lib.espeak_SetVoiceByName.restype = ctypes.c_int
  lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
  lib.espeak_SetParameter.restype = ctypes.c_int
  lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                               ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
  lib.espeak_Synth.restype = ctypes.c_int
  lib.espeak_Synchronize.restype = ctypes.c_int
  lib.espeak_Info.argtypes = [ctypes.c_void_p]
  lib.espeak_Info.restype = ctypes.c_char_p
  # Without a fixed seed some voices (f3, whisper ...) come out different in every process:
  # espeak seeds its own noise generator. Older espeak-ng builds lack this function.
  set_seed = getattr(lib, "espeak_ng_SetRandSeed", None)
  if set_seed is not None:
    set_seed.argtypes = [ctypes.c_long]
    set_seed.restype = None
  return lib, set_seed


class _WordSpeaker:
  """Says one word with an initialized espeak-ng, in any voice, rate and pitch."""

  def __init__(self, lib, set_seed, sample_rate: int, word: str):
    self._lib, self._set_seed, self._sample_rate = lib, set_seed, sample_rate
    self._text = word.encode("utf-8") + b"\0"
    self._chunks: list[bytes] = []
    # Kept on self for the whole run: if ctypes' thunk were collected, espeak would call
    # freed memory.
    self._callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                      ctypes.c_void_p)(self._collect)
    lib.espeak_SetSynthCallback(self._callback)

  def _collect(self, wav, n, events):
    del events
    if wav and n > 0:
      self._chunks.append(ctypes.string_at(wav, n * 2))
    return 0  # 0 = keep going

  def say_in_a_clip(self, voice, wpm, pitch, prange, noise_seed) -> np.ndarray:
    """The word, faster than wpm where it would not fit in MAX_WORD_SECONDS; ValueError if never."""
    limit = int(MAX_WORD_SECONDS * self._sample_rate)
    audio = self.say(voice, wpm, pitch, prange, noise_seed)
    # Too long for the window: speak faster rather than cut the word off (espeak-ng
    # goes past its classic 450 wpm limit through its bundled sonic library).
    while len(audio) > limit and wpm < MAX_RATE_WPM:
      wpm = min(MAX_RATE_WPM, int(np.ceil(wpm * len(audio) / limit * 1.05)))
      audio = self.say(voice, wpm, pitch, prange, noise_seed)
    if len(audio) > limit:
      raise ValueError(f"it lasts {len(audio) / self._sample_rate:.2f} s even at {wpm} words/min, "
                       f"more than the {MAX_WORD_SECONDS} s a 1 s clip allows")
    return audio

  def say(self, voice, wpm, pitch, prange, noise_seed) -> np.ndarray:
    """The word as int16 samples, trimmed of espeak's silence; ValueError if it fails."""
    lib = self._lib
    if lib.espeak_SetVoiceByName(voice.encode()) != 0:
      raise ValueError(f"espeak-ng has no voice {voice!r}")
    # These stick across utterances and voice changes, so every job sets all three.
    lib.espeak_SetParameter(_PARAM_RATE, wpm, 0)
    lib.espeak_SetParameter(_PARAM_PITCH, pitch, 0)
    lib.espeak_SetParameter(_PARAM_RANGE, prange, 0)
    if self._set_seed is not None:
      self._set_seed(noise_seed)
    self._chunks.clear()
    err = lib.espeak_Synth(self._text, len(self._text), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None,
                           None)
    lib.espeak_Synchronize()
    if err != 0:
      raise ValueError(f"espeak_Synth returned error {err}")
    audio = np.frombuffer(b"".join(self._chunks), dtype=np.int16)
    peak = int(np.max(np.abs(audio.astype(np.int32)))) if audio.size else 0
    if peak < 256:
      raise ValueError("espeak-ng produced no sound for it")
    # espeak pads with silence; trim it so the word's offset in the window is ours to pick.
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > peak * 0.005)
    pad = self._sample_rate // 100  # 10 ms, so soft onsets and endings survive the trim
    return audio[max(loud[0] - pad, 0):loud[-1] + pad + 1]


def _fail(msg: str) -> int:
  print(msg, file=sys.stderr)
  return _FAILED


if __name__ == "__main__":
  sys.exit(main())
