"""`audioclf evaluate --background`: a model_dir's detector on long recordings with no keyword, and on keywords placed in them.

The recordings give false accepts per hour; the split's keyword clips, added
into the same recordings at known times, the false-reject rate. With a target
of false accepts per hour, the threshold that meets it with the fewest false
rejects is kept in <model_dir>/detector.json for `audioclf listen` and the
streaming export.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Sequence

import numpy as np
import soundfile as sf

from audioclf.data import decode
from audioclf.data import manifest as manifest_lib
from audioclf.deploy import predict as predict_lib
from audioclf.params import ParamError, Params
from audioclf.streaming import detector as detector_lib
from audioclf.streaming import listen, quality
from audioclf.streaming import model as streaming

MAX_KEYWORDS = 300  # Keyword clips placed, at most: a false-reject rate to a third of a percent.
GAP_SECONDS = 1.0  # Between one keyword leaving the model's window and the next arriving.
REPORT_FILE = "detector_report.json"
SAMPLE_FILE = "keywords_sample.wav"  # The keyword stream's first minute, for audioclf listen.
SAMPLE_SECONDS = 60.0
DET_FILE = "det.png"
# Each keyword's SNR against the background where it lies, drawn uniformly: a voice over a
# room's noise, from as loud as the noise to well above it.
KEYWORD_SNR_DB = (0.0, 20.0)


def evaluate_background(model_dir: str, background: str, params: Params, split: str = "test",
                        target_false_accepts_per_hour: Optional[float] = None,
                        checkpoint: str = "best", report_dir: Optional[str] = None,
                        keyword_snr_db: Optional[Sequence[float]] = KEYWORD_SNR_DB) -> dict:
  """False accepts per hour, false rejects and the DET curve of model_dir's streaming detector.

  Args:
    model_dir: a speech_embedding model_dir.
    background: an audio file, or a folder of them, with no keyword spoken.
    params: the run's params (where the split's keyword clips are).
    split: the split whose keyword clips are placed into the background.
    target_false_accepts_per_hour: choose and keep the threshold that meets it.
    checkpoint: best, last, or a checkpoint's path.
    report_dir: default <model_dir>/eval_background.
    keyword_snr_db: (low, high) in dB: each keyword's SNR against the
      background where it lies, drawn uniformly; None: the clip's own level.

  Returns:
    The report: the operating point's threshold, false accepts per hour and
    false-reject rate, the hours of background, the keywords placed, and the
    curve.

  Raises:
    ParamError: no background audio, no keyword clips, or no threshold that
      meets the target.
  """
  stream = streaming.StreamingModel.from_model_dir(model_dir, checkpoint)
  settings = dict(detector_lib.read_settings(model_dir) or {})
  noise, clips = _background(background, stream.sample_rate), _keywords(params, split, stream)
  window_seconds = stream.window_samples / stream.sample_rate
  keywords, placed = quality.place_keywords(noise, clips, spacing_seconds(stream),
                                            stream.sample_rate, keyword_snr_db)
  curve = quality.det_curve(
      quality.stream_probabilities(stream, noise), len(noise) / stream.sample_rate,
      quality.stream_probabilities(stream, keywords), placed,
      lambda t: listen.make_detector(stream, dict(settings, threshold=t)), window_seconds)
  if target_false_accepts_per_hour is None:
    threshold = settings.get("threshold", detector_lib.DEFAULT_THRESHOLD)
    point = min(curve, key=lambda p: abs(p["threshold"] - threshold))
  else:
    point = quality.choose_threshold(curve, target_false_accepts_per_hour)
    if point is None:
      raise ParamError(f"--target_false_accepts_per_hour={target_false_accepts_per_hour}: no "
                       f"threshold up to {curve[-1]['threshold']} meets it on {background} "
                       f"({curve[-1]['false_accepts_per_hour']:.1f} at the highest)")
  report = {"threshold": point["threshold"],
            "false_accepts_per_hour": round(point["false_accepts_per_hour"], 3),
            "false_reject_rate": round(point["false_reject_rate"], 4),
            "background_hours": round(len(noise) / stream.sample_rate / 3600, 4),
            "keywords": len(placed), "keyword_snr_db": keyword_snr_db and list(keyword_snr_db),
            "smoothing_hops": listen.make_detector(stream, settings)
            .smoothing_hops, "target_false_accepts_per_hour": target_false_accepts_per_hour,
            "curve": curve}
  report_dir = report_dir or os.path.join(model_dir, "eval_background")
  _write_report(report_dir, report, point)
  _write_sample(report_dir, keywords, placed, stream.sample_rate)
  if target_false_accepts_per_hour is not None:
    report["detector"] = _keep(model_dir, settings, report)
  report["report_dir"] = report_dir
  return report


def spacing_seconds(stream: streaming.StreamingModel) -> float:
  """From one placed clip's centre to the next: the model's window of background on either side, and a gap."""
  return 2 * stream.window_samples / stream.sample_rate + GAP_SECONDS


def table(report: dict, rows: int = 8) -> str:
  """A few points of the curve around the operating threshold, as text."""
  lines = [f"{'threshold':>9}  {'FA/hour':>8}  {'FRR':>6}"]
  curve = report["curve"]
  at = next(i for i, p in enumerate(curve) if p["threshold"] == report["threshold"])
  for p in curve[max(0, at - rows // 2):at + rows // 2]:
    mark = "  <- operating point" if p["threshold"] == report["threshold"] else ""
    lines.append(f"{p['threshold']:>9.3f}  {p['false_accepts_per_hour']:>8.2f}  "
                 f"{p['false_reject_rate']:>6.3f}{mark}")
  return "\n".join(lines)


def _background(path: str, sample_rate: int) -> np.ndarray:
  """Every background file of `path`, decoded at the model's rate and joined."""
  files = predict_lib.audio_files([path])
  audio = [decode.decode_file(f, sample_rate) for f in files]
  if not audio or sum(len(a) for a in audio) < sample_rate:
    raise ParamError(f"--background={path}: no audio file of at least a second there")
  return np.concatenate(audio).astype(np.float32)


def _keywords(params: Params, split: str, stream) -> list[tuple[np.ndarray, str]]:
  """The split's keyword clips (no background label), decoded: MAX_KEYWORDS at most, spread."""
  manifest = manifest_lib.load(params)
  if list(manifest.labels) != stream.labels:
    raise ParamError(f"the model knows labels {stream.labels}, the data has "
                     f"{list(manifest.labels)}")
  files = [e for e in manifest.files(split) if e.label not in detector_lib.BACKGROUND_LABELS]
  if not files:
    raise ParamError(f"--split={split}: no keyword clips to place into the background")
  chosen = [files[i] for i in np.linspace(0, len(files) - 1, min(MAX_KEYWORDS, len(files)),
                                          dtype=int)]
  return [(decode.decode_file(e.path, stream.sample_rate)[:params.clip_samples], e.label)
          for e in chosen]


def _keep(model_dir: str, settings: dict, report: dict) -> str:
  """The operating point and what was measured there, kept in model_dir's detector.json."""
  kept = {k: report[k] for k in ("threshold", "smoothing_hops", "target_false_accepts_per_hour",
                                 "false_accepts_per_hour", "false_reject_rate",
                                 "background_hours", "keyword_snr_db")}
  return detector_lib.write_settings(model_dir, dict(settings, **kept))


def _write_sample(report_dir: str, audio: np.ndarray, placed, sample_rate: int) -> None:
  """The keyword stream's first SAMPLE_SECONDS as 16-bit audio, and where its keywords are."""
  end = int(SAMPLE_SECONDS * sample_rate)
  sf.write(os.path.join(report_dir, SAMPLE_FILE), np.clip(audio[:end], -1, 1), sample_rate,
           subtype="PCM_16")
  with open(os.path.join(report_dir, SAMPLE_FILE.replace(".wav", ".json")), "w") as f:
    json.dump([dataclasses.asdict(p) for p in placed if p.end <= SAMPLE_SECONDS], f, indent=1)
    f.write("\n")


def _write_report(report_dir: str, report: dict, point: dict) -> None:
  os.makedirs(report_dir, exist_ok=True)
  with open(os.path.join(report_dir, REPORT_FILE), "w") as f:
    json.dump(report, f, indent=2)
    f.write("\n")
  title = (f"{report['keywords']} keywords, {report['background_hours']:.2f} h of background")
  with open(os.path.join(report_dir, DET_FILE), "wb") as f:
    f.write(quality.det_png(report["curve"], point, title))
