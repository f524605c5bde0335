"""compare's ladder trends: fitted on the finished rungs, valued at the top rung's compute, and a form the
rungs cannot pin said so (issue 54, item 3)."""

from __future__ import annotations

import math

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
