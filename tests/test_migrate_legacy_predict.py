"""audioclf.migration.legacy_predict: a team's Estimator's own probabilities, on the legacy stack."""

import os

import numpy as np
import pytest

from audioclf.migration import legacy_predict
from conftest import FOREIGN



@pytest.mark.legacy_only
def test_the_estimator_predicts_what_it_predicted_when_the_fixture_was_made(team_models):
  model_dir = os.path.join(FOREIGN, "frames_gru", "model_dir")
  before = sorted(os.listdir(model_dir))
  parity = os.path.join(FOREIGN, "frames_gru", "parity.npz")
  probabilities = legacy_predict.estimator_probabilities(model_dir, f"{team_models}:frames_gru", "",
                                                         parity)
  with np.load(parity) as saved:
    assert np.max(np.abs(probabilities - saved["probabilities"])) <= 1e-6
  # model_to_estimator wrote into a copy: the team's model_dir is as it was.
  assert sorted(os.listdir(model_dir)) == before


def test_inputs_are_found_by_the_input_name_or_x_name(tmp_path):
  path = str(tmp_path / "inputs.npz")
  np.savez(path, x_audio=np.zeros([2, 3]), other=np.ones([1]))
  assert legacy_predict.inputs_of(path, "audio").shape == (2, 3)
  with pytest.raises(ValueError, match=r"no array named 'mfcc' or 'x_mfcc' .* x_audio, other"):
    legacy_predict.inputs_of(path, "mfcc")
