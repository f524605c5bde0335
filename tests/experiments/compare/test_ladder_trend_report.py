"""compare's ladder trends: fitted on the finished rungs, valued at the top rung's compute, and a form the
rungs cannot pin said so (issue 54, item 3)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from andrea_lab.experiments.compare import ladder_trend_report
from tests.experiments.compare.test_ladder_predictions import COMPUTE, DECISIONS, _loss, _runs


def test_three_rungs_fit_the_power_law_and_the_line_and_give_the_top_rungs_value():
    table = ladder_trend_report.trend_table(_runs(["r0", "r1", "r2"]), ["r0", "r1", "r2"], COMPUTE, DECISIONS, 1e14)
    rows = table.set_index(["kind", "name"])
    assert rows.loc[("loss", "b"), "at_top"] == pytest.approx(_loss("b", 1e14), abs=0.02)
    assert rows.loc[("loss", "b"), "trend"].startswith("E ") and "alpha" in rows.loc[("loss", "b"), "trend"]
    assert rows.loc[("effect", "a vs b"), "at_top"] == pytest.approx(0.1 - 0.02 * 2, abs=0.01)
    assert rows.loc[("effect", "a vs b"), "trend"] == "-0.020 nat per decade of compute"
    text = ladder_trend_report.trend_markdown(table, "top")
    assert "| effect | a vs b | r0, r1, r2 | -0.020 nat per decade of compute | +0.060 ±" in text


def test_two_rungs_leave_the_power_law_unfitted_and_say_why():
    table = ladder_trend_report.trend_table(_runs(["r0", "r1"]), ["r0", "r1"], COMPUTE, DECISIONS, 1e14)
    rows = table.set_index(["kind", "name"])
    assert rows.loc[("loss", "a"), "trend"].startswith("not fitted: a power law with an irreducible term needs 3")
    assert math.isnan(rows.loc[("loss", "a"), "at_top"]) and math.isfinite(rows.loc[("effect", "a vs b"), "at_top"])
    assert "| loss | a | r0, r1 | not fitted:" in ladder_trend_report.trend_markdown(table, "top")


def test_the_best_lr_is_interpolated_between_grid_points_and_kept_at_an_edge():
    """A parabola in log10 LR through the best grid point and its neighbours: a curve lower on the right
    neighbour than the left puts the optimum right of the grid's best; an edge optimum stays where it is."""
    from andrea_lab.experiments.compare.ladder_trends import interpolated_log10_best_lr

    lrs = [1e-3, 2e-3, 4e-3, 8e-3]

    def table(losses):  # two seeds with the same curve
        return pd.DataFrame({0: losses, 1: losses}, index=lrs)

    symmetric = interpolated_log10_best_lr(table([2.5, 2.2, 2.0, 2.2]))
    assert symmetric == pytest.approx(math.log10(4e-3))
    leaning = interpolated_log10_best_lr(table([2.5, 2.2, 2.0, 2.05]))
    assert math.log10(4e-3) < leaning < math.log10(8e-3)
    # The vertex of y = (x - x*)^2 through three points is x* exactly (here x* a quarter step right of 4e-3).
    x = [math.log10(v) for v in lrs]
    star = x[2] + 0.25 * (x[3] - x[2])
    assert interpolated_log10_best_lr(table([(v - star) ** 2 for v in x])) == pytest.approx(star)
    assert interpolated_log10_best_lr(table([2.0, 2.1, 2.2, 2.3])) == pytest.approx(math.log10(1e-3))


def test_a_parameter_the_fit_left_on_its_bound_is_said_to_be_there_not_given_an_error():
    """Losses that fall as a plain power law (no floor) push E onto its lower bound 0: its covariance is then no
    uncertainty, so the trend says the rungs did not pin it. A law with a floor keeps E inside, with its error."""
    compute = [1e12, 1e12, 3e12, 3e12, 1e13, 1e13, 3e13, 3e13]
    plain = [3.0 * (c / 1e12) ** -0.1 + jitter for c, jitter in zip(compute, [0.004, -0.004] * 4)]
    floored = [1.2 + 2.0 * (c / 1e12) ** -0.5 + jitter for c, jitter in zip(compute, [0.004, -0.004] * 4)]
    table = ladder_trend_report.trend_rows(
        {"plain": (compute, plain), "floored": (compute, floored)}, {}, ["r0", "r1", "r2", "r3"], [], 1e14
    ).set_index("name")
    assert table.loc["plain", "trend"].startswith("E 0.000 (at its lower bound: not pinned by these rungs), alpha ")
    assert "±" in table.loc["plain", "trend"].split("alpha")[1]
    floored_trend = table.loc["floored", "trend"]
    assert floored_trend.startswith("E 1.") and "bound" not in floored_trend and floored_trend.count("±") == 2
