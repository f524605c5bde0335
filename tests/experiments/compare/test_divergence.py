"""Divergence apart from loss: exact rates, paired counts, and whether the stuck window was equal."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from andrea_lab.experiments.compare.divergence import (
    clopper_pearson,
    describe_rate,
    mcnemar_exact_p,
    paired_divergences,
    stuck_window_note,
    stuck_windows,
)
from andrea_lab.experiments.compare.runs_table import read_runs_csv

REPO = Path(__file__).resolve().parents[3]


def test_clopper_pearson_known_answers():
    # 0 of 5: [0, 1 - 0.025^(1/5)] = [0, 0.5218]; 5 of 5 mirrors it; 3 of 5 from the beta quantiles.
    assert clopper_pearson(0, 5) == pytest.approx((0.0, 1 - 0.025 ** (1 / 5)))
    assert clopper_pearson(5, 5) == pytest.approx((0.025 ** (1 / 5), 1.0))
    assert clopper_pearson(3, 5) == pytest.approx((0.1466328, 0.9472550), abs=1e-6)
    assert all(math.isnan(x) for x in clopper_pearson(0, 0))
    assert describe_rate(3, 5) == "3/5 [15 %, 95 %]" and describe_rate(0, 0) == "0/0"


def test_exact_mcnemar():
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(0, 7) == pytest.approx(2 / 2**7)
    assert mcnemar_exact_p(3, 3) == pytest.approx(1.0)


def test_paired_divergences_over_the_grid_and_at_fixed_lrs():
    runs = pd.DataFrame(
        [
            dict(variant=v, lr=lr, seed=s, diverged=(v == "b" and lr == 2.0 and s < 2))
            for v in "ab"
            for lr in (1.0, 2.0)
            for s in range(3)
        ]
    )
    grid = paired_divergences(runs, "a", "b")
    assert (grid.pairs, grid.diverged_a, grid.diverged_b, grid.only_b, grid.unit) == (6, 0, 2, 2, "(lr, seed)")
    fixed = paired_divergences(runs, "a", "b", {"a": 1.0, "b": 2.0})
    assert (fixed.pairs, fixed.only_a, fixed.only_b, fixed.unit) == (3, 0, 2, "seed")


def test_the_committed_norm_placement_runs_had_unequal_stuck_windows():
    runs = read_runs_csv(REPO / "docs" / "results" / "norm_placement" / "runs.csv")
    assert stuck_windows(runs) == {"post": 40, "post-nowarmup": 0, "post-warmup100": 100, "pre": 40, "pre-nowarmup": 0}
    note = stuck_window_note(runs)
    assert note.startswith("Divergence counts are not on equal footing across these variants: these runs predate")
    assert "(post-nowarmup 0, pre-nowarmup 0, post 40, pre 40, post-warmup100 100;" in note


def test_runs_with_stuck_after_set_have_one_window():
    runs = pd.DataFrame({"variant": ["a", "b"], "warmup_steps": [0, 100], "stuck_after": [100, 100]})
    assert stuck_window_note(runs) == "Stuck-at-unigram window: from step 100 for every variant."
    assert stuck_window_note(runs.assign(stuck_after=[50, 100])).startswith(
        "Divergence counts are not on equal footing across these variants: the variants' stuck-at-unigram windows"
    )
    assert stuck_window_note(runs.assign(warmup_steps=[None, None], stuck_after=[None, None])) is None  # unknown
