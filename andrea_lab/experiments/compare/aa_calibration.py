"""A/A calibration: how often the comparison calls a difference between two identical configurations.

One A/A suite run (``experiments/suites/aa.yaml``: variant ``b`` is ``a`` with every seed offset) is one
realisation: its "not detected" says little about the false-positive rate. Resampling makes it many: the
seed sets of the two identical variants are pooled (a's seeds, then b's, each with its runs at every LR)
and split every way into two halves of equal size, the halves paired in pooled order; each split is one
A/A comparison. Reported per method: the best-LR comparison with each seed's LRs chosen on the other seeds
(the default), the in-sample best LR (the older method), and the same LR for both halves (no selection,
each LR of the grid). A false positive is a 95 % paired-t interval that excludes 0 (p < 0.05), so the
nominal rate is 5 %. The splits share runs: the rates are a calibration check, not independent trials.

The known answer: the committed 2026-12 ``docs/results/aa/runs.csv`` (5 + 5 seeds, 126 splits) gives an
in-sample best-LR false-positive rate of 11/126 = 8.7 % (tests/experiments/compare/test_aa_calibration.py).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from andrea_lab.experiments.compare import stats
from andrea_lab.runs.directory import format_lr

METHODS = ("cross_fitted", "in_sample", "same_lr")
METHOD_LABELS = {
    "cross_fitted": "best LR chosen on the other seeds (the default)",
    "in_sample": "best LR chosen in-sample (secondary)",
    "same_lr": "same LR, no selection (each LR of the grid)",
}
NOMINAL = 1 - stats.CONFIDENCE


@dataclass(frozen=True)
class Calibration:
    """False positives per method over every split of the pooled seed sets of two identical variants."""

    a: str
    b: str
    seed_sets: int
    half: int
    splits: int
    lrs: tuple[float, ...]
    tests: dict[str, int]
    false_positives: dict[str, int]
    selection_differs: int  # splits whose halves' in-sample best LRs differ: the selection step at work

    def rate(self, method: str) -> float:
        return self.false_positives[method] / self.tests[method] if self.tests[method] else math.nan


def pooled_losses(runs: pd.DataFrame, a: str, b: str, loss_column: str) -> tuple[np.ndarray, tuple[float, ...]]:
    """Capped losses of the pooled seed sets (rows: a's seeds, then b's; columns: the LRs both ran); a seed
    set missing any of those LRs is left out."""
    stats.check_known([a, b], runs)
    counted = stats.counted_runs(runs[runs["lr"].notna()], loss_column)
    tables = [stats.loss_table(counted, name) for name in (a, b)]
    lrs = tables[0].index.intersection(tables[1].index)
    rows = [table.loc[lrs, seed].to_numpy(dtype=float) for table in tables for seed in sorted(table.columns)]
    pooled = np.array([row for row in rows if not np.isnan(row).any()]).reshape(-1, len(lrs))
    return pooled, tuple(float(lr) for lr in lrs)


def _rejects(differences: np.ndarray) -> np.ndarray:
    """Per row of paired differences: does the 95 % paired-t interval exclude 0?"""
    n = differences.shape[-1]
    mean, sd = differences.mean(axis=-1), differences.std(axis=-1, ddof=1)
    critical = scipy_stats.t.ppf(0.5 + stats.CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    return np.where(sd > 0, np.abs(mean) > critical, mean != 0)


def _held_out_picks(half: np.ndarray) -> np.ndarray:
    """Per seed set of a half: the LR index with the lowest mean over the half's other seed sets (ties to
    the smaller LR, as :func:`andrea_lab.experiments.compare.stats.best_lr`)."""
    others = (half.sum(axis=0) - half) / (half.shape[0] - 1)
    return others.argmin(axis=1)


def calibrate(runs: pd.DataFrame, a: str, b: str, loss_column: str) -> Calibration:
    """Every split of the pooled seed sets into two halves (each unordered split once), judged three ways."""
    pooled, lrs = pooled_losses(runs, a, b, loss_column)
    half = pooled.shape[0] // 2
    if half < 2:
        raise ValueError(
            f"A/A calibration of {a!r} and {b!r} needs at least 4 complete seed sets, got {pooled.shape[0]}"
        )
    units = range(2 * half)  # an odd one out (the last seed set) is left out
    in_sample, cross_fitted, same_lr, differs = [], [], [], 0
    for first in itertools.combinations(units, half):
        if first[0] != 0:  # each unordered split once: the half holding seed set 0 goes first
            break
        second = [unit for unit in units if unit not in first]
        one, two = pooled[list(first)], pooled[second]
        best_one, best_two = one.mean(axis=0).argmin(), two.mean(axis=0).argmin()
        differs += int(best_one != best_two)
        in_sample.append(one[:, best_one] - two[:, best_two])
        rows = np.arange(half)
        cross_fitted.append(one[rows, _held_out_picks(one)] - two[rows, _held_out_picks(two)])
        same_lr.extend(one[:, j] - two[:, j] for j in range(len(lrs)))
    found = {
        "cross_fitted": _rejects(np.array(cross_fitted)),
        "in_sample": _rejects(np.array(in_sample)),
        "same_lr": _rejects(np.array(same_lr)),
    }
    return Calibration(
        a,
        b,
        pooled.shape[0],
        half,
        len(in_sample),
        lrs,
        {method: int(found[method].size) for method in METHODS},
        {method: int(found[method].sum()) for method in METHODS},
        differs,
    )


def calibration_block(calibration: Calibration, runs: int) -> str:
    """The Markdown that docs/results.md quotes: the false-positive rates beside the nominal 5 %."""
    c = calibration
    lines = [
        f"A/A calibration from {runs} runs: the seed sets of `{c.a}` and `{c.b}` (one configuration) pooled "
        f"({c.seed_sets}, each with its runs at LRs {', '.join(format_lr(lr) for lr in c.lrs)}) and split "
        f"every way into two halves of {c.half}, paired in seed order: {c.splits} splits, each one A/A "
        "comparison. A false positive is a 95 % interval that excludes 0.",
        "",
        "| comparison | tests | false positives | rate | nominal |",
        "|---|---|---|---|---|",
    ]
    for method in METHODS:
        lines.append(
            f"| {METHOD_LABELS[method]} | {c.tests[method]} | {c.false_positives[method]} | "
            f"{c.rate(method):.1%} | {NOMINAL:.0%} |".replace("%", " %")
        )
    lines += [
        "",
        f"The two halves' in-sample best LRs differ in {c.selection_differs} of {c.splits} splits (where "
        "they agree, the selection step is not exercised). The splits share runs, so the rates are not "
        "independent trials: a calibration check, not an estimate with a binomial interval.",
    ]
    return "\n".join(lines)
