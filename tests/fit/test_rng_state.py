"""Every generator's state survives a checkpoint, in a form the weights-only loader reads."""

import random

import numpy as np
import torch

from andrea_lab.fit.rng_state import capture_rng_states, restore_rng_states


def test_torch_numpy_and_python_continue_where_they_were_after_a_weights_only_round_trip(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    torch.save(capture_rng_states(), tmp_path / "rng.pt")
    expected = (torch.rand(2), np.random.rand(2), random.random())
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    restore_rng_states(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]
