"""Holm's step-down adjustment against known answers (R's p.adjust), and its edge cases."""

from __future__ import annotations

import math

import pytest

from andrea_lab.experiments.compare.multiplicity import holm


def test_holm_known_answer():
    # R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") -> 0.03 0.06 0.06 0.02
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_known_answer_with_capping_and_ties():
    # R: p.adjust(c(0.5, 0.02, 0.02, 0.9, 0.001), "holm") -> 1.000 0.080 0.080 1.000 0.005
    assert holm([0.5, 0.02, 0.02, 0.9, 0.001]) == pytest.approx([1.0, 0.08, 0.08, 1.0, 0.005])


def test_holm_is_never_below_the_raw_p_and_a_family_of_one_is_unchanged():
    ps = [0.2, 0.001, 0.04, 0.3, 0.011]
    assert all(adjusted >= raw for adjusted, raw in zip(holm(ps), ps))
    assert holm([0.03]) == [0.03] and holm([]) == []


def test_a_missing_p_counts_as_one_and_keeps_its_place_in_the_family():
    assert holm([0.01, math.nan, None]) == pytest.approx([0.03, 1.0, 1.0])
