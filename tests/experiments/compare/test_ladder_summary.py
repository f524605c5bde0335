"""The ladder's opening sentence: the cheapest rung agreeing with the top on >= 90 % of decisions, and what a
decision costs there in CPU-minutes (issue 54, item 4)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from andrea_lab.experiments.compare import ladder, ladder_summary
from tests.experiments.compare.test_ladder import COMPUTE, DECISIONS, _ladder


def _costed(runs: pd.DataFrame, seconds: float = 60.0, threads: int = 1) -> pd.DataFrame:
    return runs.assign(wall_time_s=seconds, threads=threads)


def _headline(runs: pd.DataFrame) -> str:
    table = ladder.decision_accuracy(runs, list(COMPUTE), DECISIONS, COMPUTE)
    return ladder_summary.headline(table, ladder_summary.minutes_per_decision(runs, list(COMPUTE), DECISIONS))


def test_a_decision_costs_the_cpu_time_of_both_variants_runs_at_the_rung():
    runs = _costed(_ladder({"r0": (0.1,) * 4, "top": (-0.2,) * 4}), seconds=30.0, threads=2)
    # 15 runs per variant (3 LRs x 5 seeds), two variants, 30 s on 2 threads each: 30 CPU-minutes.
    assert ladder_summary.decision_minutes(runs, "r0", DECISIONS[0]) == pytest.approx(30.0)
    runs.loc[runs.index[0], "threads"] = math.nan  # one run that did not record its threads: no cost
    assert math.isnan(ladder_summary.decision_minutes(runs, "r0", ladder.Decision("a", "ref")))
    assert math.isnan(ladder_summary.minutes_per_decision(runs, ["r0"], DECISIONS)["r0"])


def test_the_cheapest_rung_at_or_above_ninety_percent_is_named_with_its_cost_and_interval():
    # r0 agrees on 3 of 4 (0.75), r1 on 4 of 4: r1 is the cheapest agreeing rung though r0 is cheaper.
    runs = _costed(_ladder({"r0": (0.1, -0.1, -0.1, -0.1), "r1": (-0.1,) * 4, "top": (-0.2,) * 4}))
    text = _headline(runs)
    assert text.startswith("At the cheapest rung that agrees with the top rung (top) on 90 % or more")
    assert "r1 (0.133x the top rung's 6·N·D; 1.00 [1.00, 1.00] of 4 decisions agree)" in text
    assert "a decision costs 30 CPU-minutes, against 30 CPU-minutes at the top rung" in text


def test_no_agreeing_rung_names_the_closest_and_a_missing_top_names_what_is_missing():
    runs = _costed(_ladder({"r0": (0.1, 0.1, 0.1, -0.1), "r1": (0.1, 0.1, -0.1, -0.1), "top": (-0.2,) * 4}))
    assert _headline(runs).startswith("No rung below the top (top) agrees with it on 90 % of the loss decisions")
    assert "(the closest: r1, 0.50 [0.50, 0.50] of 4 decisions agree)" in _headline(runs)
    lower = runs[runs["scale"] != "top"]
    text = _headline(lower)
    assert "top rung (top) has not finished" in text and "finished: r0, r1; missing: top" in text
    assert "r0 30 CPU-minutes, r1 30 CPU-minutes" in text
    assert "agrees with the top" not in text


def test_each_rungs_arithmetic_is_read_from_its_runs_and_shown_beside_its_accuracy():
    runs = _ladder({"r0": (0.1,) * 4, "r1": (-0.1,) * 4, "top": (-0.2,) * 4})
    runs["precision"] = runs["scale"].map({"r0": "32-true", "r1": "bf16-mixed", "top": "bf16-mixed"})
    runs.loc[runs.index[-1], "precision"] = "32-true"  # one top-rung run in fp32: the rung says both
    found = ladder_summary.arithmetic(runs, [*COMPUTE, "absent"])
    assert found == {"r0": "fp32", "r1": "bf16-mixed", "top": "bf16-mixed, fp32", "absent": "—"}
    table = ladder.decision_accuracy(runs, list(COMPUTE), DECISIONS, COMPUTE)
    table["arithmetic"] = table["rung"].map(found)
    lines = ladder.accuracy_markdown(table).splitlines()
    assert lines[0].endswith("| arithmetic | status |") and lines[3].endswith("| bf16-mixed | finished |")
