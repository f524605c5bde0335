"""Trend fits of a ladder recover known laws (issue 54)."""

from __future__ import annotations

import numpy as np
import pytest

from andrea_lab.experiments.compare import ladder_trends

COMPUTE = np.array([1e12, 3e12, 1e13, 3e13, 1e14])


def test_power_law_with_irreducible_term_recovers_its_parameters_and_predicts_the_next_rung():
    law = lambda c: 1.5 + 2.0 * (c / 1e12) ** -0.4  # noqa: E731
    rng = np.random.default_rng(0)
    x = np.repeat(COMPUTE[:4], 5)
    y = law(x) + rng.normal(0, 0.003, x.size)
    fit = ladder_trends.fit_power_law(x, y)
    assert fit.e == pytest.approx(1.5, abs=0.1) and fit.alpha == pytest.approx(0.4, abs=0.05)
    predicted = fit.predict(COMPUTE[4])
    assert abs(predicted.value - law(COMPUTE[4])) < 3 * predicted.se + 0.01
    assert 0 < predicted.se < 0.1


def test_power_law_needs_three_computes():
    with pytest.raises(ValueError, match="needs 3 computes or more, got 2"):
        ladder_trends.fit_power_law([1e12, 1e12, 2e12], [3.0, 3.1, 2.9])


def test_effect_trend_is_linear_in_log_compute_and_can_cross_zero():
    x = np.repeat(COMPUTE[:4], 3)
    effect = 0.05 - 0.04 * (np.log10(x) - 12) + np.tile([-0.002, 0.0, 0.002], 4)
    fit = ladder_trends.fit_log_linear(x, effect)
    assert fit.slope == pytest.approx(-0.04, abs=1e-3)
    predicted = fit.predict(COMPUTE[4])
    assert predicted.value == pytest.approx(0.05 - 0.04 * 2, abs=0.005) and predicted.value < 0
    assert predicted.se > 0
