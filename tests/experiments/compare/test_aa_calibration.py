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


def _pool(seed_sets_per_variant: int, lrs=(1e-3, 2e-3, 4e-3), sd: float = 0.05, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        [
            dict(variant=v, lr=lr, seed=s, status="finished", divergence_kind=None, initial_val_loss=5.0,
                 final_val_loss=2.0 + 0.02 * abs(np.log2(lr / 2e-3)) + rng.normal(0, sd))
            for v in "ab"
            for s in range(seed_sets_per_variant)
            for lr in lrs
        ]
    )  # fmt: skip


def test_the_exact_sign_flip_of_the_calibration_is_the_claims_test():
    from andrea_lab.experiments.compare.aa_calibration import _sign_flip_rejects
    from andrea_lab.experiments.compare.stats import sign_flip_p

    differences = np.random.default_rng(3).normal(0.02, 0.03, size=(300, 8))
    expected = [sign_flip_p(row)[0] < 0.05 for row in differences]
    assert list(_sign_flip_rejects(differences)) == expected and 0 < sum(expected) < 300


def test_rates_by_seeds_per_arm_recount_with_the_claims_functions(monkeypatch):
    """Each drawn pair of halves judged by the functions a claim uses gives the same counts."""
    from andrea_lab.experiments.compare import aa_calibration
    from andrea_lab.experiments.compare.aa_calibration import _splits, pooled_losses, rates_at_seeds
    from andrea_lab.experiments.compare.stats import paired_difference, sign_flip_p

    monkeypatch.setattr(aa_calibration, "MAX_SPLITS", 60)
    runs = _pool(6)  # 12 seed sets: halves of 3 and 5 fit, 8 and 10 do not
    rates = rates_at_seeds(runs, "a", "b", "final_val_loss")
    assert [r.seeds for r in rates] == [3, 5] and [r.sign_flip_floor for r in rates] == [0.25, 0.0625]
    pooled, lrs = pooled_losses(runs, "a", "b", "final_val_loss")
    for r in rates:
        first, second, sampled = _splits(12, r.seeds, np.random.default_rng(r.seeds))
        assert sampled and r.splits == len(first) == 60
        t_rejects = sign_rejects = differs = t_rejects_where_differs = 0
        for one_units, two_units in zip(first, second):
            one, two = pooled[one_units], pooled[two_units]
            picks = [np.delete(one, i, axis=0).mean(axis=0).argmin() for i in range(r.seeds)]
            picks_two = [np.delete(two, i, axis=0).mean(axis=0).argmin() for i in range(r.seeds)]
            chosen_one = {i: one[i, picks[i]] for i in range(r.seeds)}
            chosen_two = {i: two[i, picks_two[i]] for i in range(r.seeds)}
            d = [chosen_one[i] - chosen_two[i] for i in range(r.seeds)]
            interval = paired_difference(chosen_one, chosen_two)
            t_rejects += interval.low > 0 or interval.high < 0
            sign_rejects += sign_flip_p(d)[0] < 0.05
            halves_differ = one.mean(axis=0).argmin() != two.mean(axis=0).argmin()
            differs += halves_differ
            t_rejects_where_differs += halves_differ and (interval.low > 0 or interval.high < 0)
        assert r.false_positives["cross_fitted"] == t_rejects and r.false_positives["sign_flip"] == sign_rejects
        assert (r.selection_differs, r.false_positives_where_differs) == (differs, t_rejects_where_differs)
        assert 0 < differs < 60, "the flat optimum must make some halves choose differently"
        assert r.tests["same_lr"] == 60 * len(lrs)


def test_a_pool_too_large_to_split_every_way_is_sampled_and_says_so():
    """60 + 60 seed sets have C(120, 60) / 2 splits (600 + 600 hung `andrea compare` on a handed table): a
    seeded sample of MAX_SPLITS, the same on every run, named in the block."""
    from andrea_lab.experiments.compare.aa_calibration import MAX_SPLITS, rates_at_seeds

    runs = _pool(60, lrs=(1e-3, 2e-3))
    calibration = calibrate(runs, "a", "b", "final_val_loss")
    assert calibration.sampled and calibration.splits == MAX_SPLITS and calibration.half == 60
    assert calibrate(runs, "a", "b", "final_val_loss") == calibration
    block = calibration_block(calibration, len(runs), rates_at_seeds(runs, "a", "b", "final_val_loss"))
    assert f"split at random into two halves of 60 ({MAX_SPLITS} splits drawn, seeded, of more than 10^" in block
    assert "| 10 | 20000 |" in block
    header = "| sign-flip floor | halves' best LRs differ | paired t, best LR on the other seeds, where they differ |"
    assert header in block
