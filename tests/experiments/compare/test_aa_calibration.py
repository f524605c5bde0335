"""A/A calibration by resampling the identical-configuration seeds: the known answer on the A/A runs of
2026-12-01 (tests/experiments/compare/data/runs-2026-12-01/aa.csv, the table docs/results/aa/ had before its rerun)
(STATISTICS.md / issue 26: about 8.7 % in-sample over 126 splits of 10 seeds),
and a constructed case where the in-sample selection is exercised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from andrea_lab.experiments.compare.aa_calibration import calibrate, calibration_block
from andrea_lab.experiments.compare.runs_table import read_runs_csv

REPO = Path(__file__).resolve().parents[3]


def test_the_committed_aa_runs_give_the_known_false_positive_rate():
    runs = read_runs_csv(REPO / "tests" / "experiments" / "compare" / "data" / "runs-2026-12-01" / "aa.csv")
    calibration = calibrate(runs, "a", "b", "heldout_loss")
    assert (calibration.seed_sets, calibration.half, calibration.splits) == (10, 5, 126)
    assert calibration.false_positives["in_sample"] == 11 and calibration.rate("in_sample") == pytest.approx(
        0.0873, abs=1e-4
    )
    assert calibration.tests["same_lr"] == 3 * 126
    assert calibration.selection_differs == 0, "the committed grid never makes the halves choose differently"
    block = calibration_block(calibration, len(runs))
    assert "| best LR chosen in-sample (secondary) | 126 | 11 | 8.7 % | 5 % |" in block


def test_every_split_is_the_comparison_the_claims_make(tmp_path):
    """Against a brute-force reference: each split of 3 + 3 seed sets (10 splits) compared with the same
    functions a claim uses (best_lr, held_out_best_lrs, paired_difference), on a flat optimum where the
    halves' choices differ."""
    import itertools

    from andrea_lab.experiments.compare.selection import difference_at, held_out_best_lrs
    from andrea_lab.experiments.compare.stats import best_lr, paired_difference

    rng = np.random.default_rng(0)  # a draw where every method has a false positive: the counts can differ
    lrs = (1e-3, 2e-3, 4e-3)
    runs = pd.DataFrame(
        [
            dict(
                variant=v,
                lr=lr,
                seed=s,
                status="finished",
                divergence_kind=None,
                initial_val_loss=5.0,
                final_val_loss=2.0 + rng.normal(0, 0.05),
            )
            for v in "ab"
            for s in range(3)
            for lr in lrs
        ]
    )
    calibration = calibrate(runs, "a", "b", "final_val_loss")
    pooled = [
        runs[(runs.variant == v) & (runs.seed == s)].set_index("lr")["final_val_loss"] for v in "ab" for s in range(3)
    ]
    expected = {"in_sample": 0, "cross_fitted": 0, "same_lr": 0}
    splits = [first for first in itertools.combinations(range(6), 3) if 0 in first]
    for first in splits:
        one = pd.DataFrame({k: pooled[u] for k, u in enumerate(first)})
        two = pd.DataFrame({k: pooled[u] for k, u in enumerate(u for u in range(6) if u not in first)})
        excludes = lambda d: d.low > 0 or d.high < 0  # noqa: E731
        expected["in_sample"] += excludes(paired_difference(one.loc[best_lr(one)], two.loc[best_lr(two)]))
        expected["cross_fitted"] += excludes(difference_at(one, two, held_out_best_lrs(one), held_out_best_lrs(two)))
        expected["same_lr"] += sum(excludes(paired_difference(one.loc[lr], two.loc[lr])) for lr in lrs)
    assert calibration.splits == len(splits) == 10 and calibration.selection_differs > 0
    assert calibration.false_positives == expected and min(expected.values()) > 0


def test_too_few_seed_sets_is_refused():
    rows = [
        dict(
            variant=v,
            lr=1e-3,
            seed=s,
            status="finished",
            divergence_kind=None,
            initial_val_loss=5.0,
            final_val_loss=2.0,
        )
        for v in "ab"
        for s in range(1)
    ]
    with pytest.raises(ValueError, match="needs at least 4 complete seed sets, got 2"):
        calibrate(pd.DataFrame(rows), "a", "b", "final_val_loss")
