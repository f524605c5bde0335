"""The sign-flip test: every flip enumerated up to 20 seeds, a sampled p labelled with its error past that."""

from __future__ import annotations

import math

import numpy as np
import pytest


def test_twenty_seeds_all_one_way_enumerate_all_two_to_the_twenty_flips_exactly():
    """STATISTICS.md's known answer: 2 / 2^20 = 1.907e-06 exact, where 200,000 sampled flips read 5e-06."""
    from andrea_lab.experiments.compare.sign_flip import sign_flip_test

    found = sign_flip_test([0.01 * (i + 1) for i in range(20)])
    assert not found.sampled and found.p == 2 / 2**20 == found.floor
    assert found.describe() == "1.91e-06 exact"


def test_enumerated_sign_flips_match_the_sign_matrix_on_mixed_signs():
    """The halves' outer sum counts the same flips as the full (2^n, n) sign matrix, ties included."""
    from andrea_lab.experiments.compare.sign_flip import every_sign_flip, sign_flip_test

    values = np.random.default_rng(3).normal(0.2, 1.0, 13).round(1)  # rounded: many tied sums
    full = np.abs(every_sign_flip(13) @ values) >= abs(values.sum()) * (1 - 1e-12)
    assert sign_flip_test(values).p == pytest.approx(full.mean(), abs=0)


def test_a_sampled_sign_flip_p_is_labelled_with_its_error_and_never_zero():
    """Past 20 seeds the p is drawn: the +1 correction ((hits + 1) / (draws + 1)) keeps it above 0, and it says
    it was sampled, with its Monte Carlo standard error."""
    from andrea_lab.experiments.compare.sign_flip import RANDOM_FLIPS, sign_flip_test

    found = sign_flip_test([0.1] * 21)  # 2 / 2^21 of the flips are as extreme: almost surely none drawn
    assert found.sampled and found.draws == RANDOM_FLIPS
    assert found.p == pytest.approx(1 / (RANDOM_FLIPS + 1)) and found.p > found.floor
    assert found.error == pytest.approx(math.sqrt(found.p * (1 - found.p) / RANDOM_FLIPS))
    assert found.describe() == "5e-06 sampled (± 5e-06, 200,000 flips)"
