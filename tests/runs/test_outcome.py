"""A run's outcome from its record: three failures with three names, and a rise that came back is a spike."""

from __future__ import annotations

import math

import pytest

from andrea_lab.runs.directory import BLEW_UP, FINAL_ABOVE_BEST, LOSS_ROSE, NONFINITE, STUCK_AT_UNIGRAM
from andrea_lab.runs.directory import TRAINED_THEN_DIVERGED as ROSE
from andrea_lab.runs.outcome import RECOVERED_MARGIN, Outcome, classify


def test_no_divergence_is_trained():
    assert classify(None) == Outcome("trained") and classify(math.nan, math.nan) == Outcome("trained")


def test_the_plateau_is_stuck_by_its_step():
    found = classify(STUCK_AT_UNIGRAM, None, 150.0, 5.5, 3.05, 3.07)
    assert found == Outcome("stuck", 150) and found.failed and found.describe() == "stuck from step 150"


@pytest.mark.parametrize(
    "kind, cause, final, expected",
    [
        (NONFINITE, None, None, Outcome("blew_up", 80)),  # non-finite before it trained
        (ROSE, NONFINITE, None, Outcome("blew_up", 80)),  # non-finite after it trained
        (BLEW_UP, None, 30.5, Outcome("blew_up", 80, 25.0)),  # held well above where it started: by how much
    ],
)
def test_non_finite_or_exploded_is_a_blow_up(kind, cause, final, expected):
    assert classify(kind, cause, 80, 5.5, 5.5, final) == expected


def test_a_rise_that_stayed_up_to_the_end_is_a_regression_by_final_minus_best():
    """instability.yaml's d64 baseline at 0.1, seed 0: best 2.309, final 2.779 at the end."""
    found = classify(ROSE, LOSS_ROSE, 1034, 5.403018, 2.309379, 2.778921)
    assert found.kind == "regressed" and found.step == 1034 and found.size == pytest.approx(0.469542)
    assert found.describe() == "regressed +0.470 nat from step 1034"
    assert classify(FINAL_ABOVE_BEST, None, 2000, 5.4, 2.3, 3.5).kind == "regressed"


def test_a_rise_that_came_back_is_a_spike_not_a_divergence():
    """instability.yaml's QK-norm at 0.3, seed 1: a rise at step 1252 and a final loss equal to its best."""
    found = classify(ROSE, LOSS_ROSE, 1252, 5.43, 1.854281, 1.854281, {"size": 0.8, "length": 120})
    assert found == Outcome("trained", rise={"step": 1252, "size": 0.8, "length": 120}) and not found.failed
    just_above = classify(ROSE, LOSS_ROSE, 900, 5.4, 2.0, 2.0 + RECOVERED_MARGIN)
    assert just_above.kind == "regressed", "the margin's edge is not back"


def test_a_rise_followed_into_a_non_finite_loss_is_a_blow_up():
    assert classify(ROSE, LOSS_ROSE, 900, 5.4, 2.0, None, {"size": 3.0, "length": None, "nonfinite_step": 960}) == (
        Outcome("blew_up", 960)
    )


def test_an_unknown_kind_names_itself_and_the_known_ones():
    with pytest.raises(ValueError, match=r"'exploded'.*stuck_at_unigram.*final_above_best"):
        classify("exploded")


def test_a_rise_that_exploded_above_the_initial_loss_is_a_blow_up_even_if_it_came_back():
    """stability.md's peak-0.5 run: loss 2.48, then 46 nats, then 2.9 by the end: it exploded, not regressed."""
    exploded = classify(ROSE, LOSS_ROSE, 847, 5.5, 2.4, 2.9, {"size": 43.6, "length": 400})
    assert exploded == Outcome("blew_up", 847, pytest.approx(40.5))
    assert classify(ROSE, LOSS_ROSE, 847, 5.5, 2.4, 2.41, {"size": 4.0, "length": 80}).kind == "trained"
