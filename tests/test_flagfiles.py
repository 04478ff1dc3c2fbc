"""--preset=NAME and --flagfile=PATH: read into flags before absl parses them, from a checkout or a wheel."""

import os
import subprocess
import sys
import zipfile

import pytest

from audioclf.commands import flagfiles
from audioclf.params import ParamError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_preset_reads_in_place_with_the_presets_it_includes():
  flags = flagfiles.expand(["--train_steps=5", "--preset=real_speech", "--model_dir=x"])
  assert flags[0] == "--train_steps=5" and flags[-1] == "--model_dir=x"
  assert "--model=cnn" in flags  # From demo, which real_speech includes by name.
  # What real_speech sets comes after what it includes, so it wins, as in absl.
  assert flags.index("--model_args=width=16") < flags.index("--model_args=width=32")
  assert not [f for f in flags if f.startswith(("--preset", "--flagfile", "#"))]


def test_a_flagfile_may_include_a_preset_and_a_flagfile(tmp_path):
  inner = tmp_path / "inner.flags"
  inner.write_text("# a comment\n\n--batch_size=7\n")
  outer = tmp_path / "outer.flags"
  outer.write_text(f"--preset=smoke\n--flagfile={inner}\n// another\n")
  flags = flagfiles.expand([f"--flagfile={outer}"])
  assert flags[-1] == "--batch_size=7" and "--model=cnn" in flags


def test_arguments_after_a_double_dash_are_left_alone():
  assert flagfiles.expand(["--x=1", "--", "--preset=nope"]) == ["--x=1", "--", "--preset=nope"]


@pytest.mark.parametrize("arg, message", [
    ("--preset=nope", r"--preset=nope: no such preset; audioclf ships demo, demo_12, "
                      r"pretrained_speech, real_speech"),
    ("--preset=../params", "no such preset"),
    ("--flagfile=/nonexistent.flags", r"cannot read it \(No such file or directory\)"),
])
def test_what_cannot_be_read_is_one_line(arg, message):
  with pytest.raises(ParamError, match=message):
    flagfiles.expand([arg])


def test_a_file_that_includes_itself_is_refused(tmp_path):
  loop = tmp_path / "loop.flags"
  loop.write_text(f"--flagfile={loop}\n")
  with pytest.raises(ParamError, match="includes itself"):
    flagfiles.expand([f"--flagfile={loop}"])


def test_every_preset_in_the_checkout_is_shipped():
  assert flagfiles.names() == sorted(f[:-len(".flags")] for f in os.listdir(
      os.path.join(ROOT, "flags")) if f.endswith(".flags"))


@pytest.mark.slow
@pytest.mark.once
def test_presets_work_from_a_built_wheel_outside_the_checkout(tmp_path):
  subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "-w", str(tmp_path / "dist"), ROOT], check=True, timeout=300,
                 capture_output=True)
  wheel, = (tmp_path / "dist").iterdir()
  with zipfile.ZipFile(wheel) as z:
    z.extractall(tmp_path / "site")
  away = tmp_path / "elsewhere"
  away.mkdir()
  code = ("import audioclf; from audioclf.commands import flagfiles; print(audioclf.__file__); "
          "print(flagfiles.expand(['--preset=pretrained_speech'])[-1])")
  out = subprocess.run([sys.executable, "-c", code], cwd=away, check=True, timeout=120,
                       capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}).stdout
  where, last = out.split()
  assert where.startswith(str(tmp_path / "site")) and last.startswith("--")
