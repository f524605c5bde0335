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
    sampled: bool = False  # a seeded sample of MAX_SPLITS splits, not every one
    left_out: int = 0  # seed sets beyond MAX_SEED_SETS_PER_VARIANT, not pooled

    def rate(self, method: str) -> float:
        return self.false_positives[method] / self.tests[method] if self.tests[method] else math.nan


#: The seed sets of each variant the calibration pools (the first, in seed order): a suite has tens; a handed
#: table of thousands would ask for gigabytes of splits, and the block says how many were left out.
MAX_SEED_SETS_PER_VARIANT = 100


def seed_sets_beyond_the_pool(runs: pd.DataFrame, a: str, b: str) -> int:
    """How many seed sets of ``a`` and ``b`` :func:`pooled_losses` leaves out for :data:`MAX_SEED_SETS_PER_VARIANT`."""
    seeds = [runs.loc[runs["variant"] == name, "seed"].nunique() for name in (a, b)]
    return sum(max(0, count - MAX_SEED_SETS_PER_VARIANT) for count in seeds)


def pooled_losses(runs: pd.DataFrame, a: str, b: str, loss_column: str) -> tuple[np.ndarray, tuple[float, ...]]:
    """Capped losses of the pooled seed sets (rows: a's seeds, then b's, at most
    :data:`MAX_SEED_SETS_PER_VARIANT` each; columns: the LRs both ran); a seed set missing any of those LRs is
    left out."""
    stats.check_known([a, b], runs)
    counted = stats.counted_runs(runs[runs["lr"].notna()], loss_column)
    tables = [stats.loss_table(counted, name) for name in (a, b)]
    lrs = tables[0].index.intersection(tables[1].index)
    rows = [
        table.loc[lrs, seed].to_numpy(dtype=float)
        for table in tables
        for seed in sorted(table.columns)[:MAX_SEED_SETS_PER_VARIANT]
    ]
    pooled = np.array([row for row in rows if not np.isnan(row).any()]).reshape(-1, len(lrs))
    return pooled, tuple(float(lr) for lr in lrs)


def _rejects(differences: np.ndarray) -> np.ndarray:
    """Per row of paired differences: does the 95 % paired-t interval exclude 0?"""
    n = differences.shape[-1]
    mean, sd = differences.mean(axis=-1), differences.std(axis=-1, ddof=1)
    critical = scipy_stats.t.ppf(0.5 + stats.CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    return np.where(sd > 0, np.abs(mean) > critical, mean != 0)


def _held_out_picks(half: np.ndarray) -> np.ndarray:
    """Per seed set of a half (``(seed sets, LRs)``, or ``(splits, seed sets, LRs)`` for many halves at once):
    the LR index with the lowest mean over the half's other seed sets (ties to the smaller LR, as
    :func:`andrea_lab.experiments.compare.stats.best_lr`)."""
    others = (half.sum(axis=-2, keepdims=True) - half) / (half.shape[-2] - 1)
    return others.argmin(axis=-1)


#: At most this many splits are judged: every split where there are no more (8 + 8 seed sets: 6,435), else
#: this many drawn at random (seeded, so a report regenerates byte for byte). Without the bound a handed
#: table of a few hundred seeds asked for more splits than there are atoms (C(600, 300) / 2).
MAX_SPLITS = 20_000

#: The seeds per arm at which the false-positive rate is also reported (where the pool holds two such halves).
RATES_AT_SEEDS = (3, 5, 8, 10)


def _splits(units: int, half: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, bool]:
    """Index arrays ``(first, second)``, each ``(splits, half)``, of disjoint halves of ``range(units)``, and
    whether they were sampled: every unordered split when the two halves cover the pool and there are at
    most :data:`MAX_SPLITS`, else :data:`MAX_SPLITS` random ones (halves paired in drawn order)."""
    if 2 * half == units and math.comb(units, half) // 2 <= MAX_SPLITS:
        firsts = [first for first in itertools.combinations(range(units), half) if first[0] == 0]
        seconds = [[unit for unit in range(units) if unit not in first] for first in firsts]
        return np.array(firsts), np.array(seconds), False
    drawn = np.argsort(rng.random((MAX_SPLITS, units)), axis=1)
    return drawn[:, :half], drawn[:, half : 2 * half], True


def _sign_flip_rejects(differences: np.ndarray) -> np.ndarray:
    """Per row: is the exact two-sided sign-flip p (stats.sign_flip_p) below the nominal level?"""
    n = differences.shape[-1]
    signs = stats.every_sign_flip(n)
    observed = np.abs(differences.mean(axis=-1)) * stats.AS_EXTREME
    rejects = np.empty(len(differences), dtype=bool)
    for start in range(0, len(differences), 1000):  # (1000, 2^n) at a time: 8 MB at 10 seeds
        flipped = np.abs(differences[start : start + 1000] @ signs.T) / n
        rejects[start : start + 1000] = (flipped >= observed[start : start + 1000, None]).mean(axis=1) < NOMINAL
    return rejects


@dataclass(frozen=True)
class RatesAtSeeds:
    """The false-positive rates with ``seeds`` per arm, from random pairs of disjoint halves of the pool."""

    seeds: int
    splits: int
    tests: dict[str, int]
    false_positives: dict[str, int]
    sign_flip_floor: float
    #: Splits whose halves' in-sample best LRs differ (the selection step at work), and the paired t's false
    #: positives after the default selection among them: the rate where the selection can matter, which the
    #: pooled rate dilutes when one LR is every half's optimum.
    selection_differs: int = 0
    false_positives_where_differs: int = 0

    def rate(self, method: str) -> float:
        return self.false_positives[method] / self.tests[method] if self.tests[method] else math.nan


def _judge(
    pooled: np.ndarray, first: np.ndarray, second: np.ndarray, sign_flip: bool = False
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every method's rejections over the splits (and the exact sign-flip's, given ``sign_flip``: 2^half
    sign patterns per split), and per split whether its halves chose different best LRs."""
    one, two = pooled[first], pooled[second]  # (splits, half, LRs)
    splits, half, n_lrs = one.shape
    best_one, best_two = one.mean(axis=1).argmin(axis=1), two.mean(axis=1).argmin(axis=1)
    rows = np.arange(splits)[:, None]
    in_sample = one[rows, :, best_one[:, None]][:, 0] - two[rows, :, best_two[:, None]][:, 0]
    seeds = np.arange(half)[None, :]
    cross_fitted = one[rows, seeds, _held_out_picks(one)] - two[rows, seeds, _held_out_picks(two)]
    same_lr = (one - two).transpose(0, 2, 1).reshape(splits * n_lrs, half)
    found = {"cross_fitted": _rejects(cross_fitted), "in_sample": _rejects(in_sample), "same_lr": _rejects(same_lr)}
    if sign_flip:
        found["sign_flip"] = _sign_flip_rejects(cross_fitted)
    return found, best_one != best_two


def calibrate(runs: pd.DataFrame, a: str, b: str, loss_column: str) -> Calibration:
    """Every split of the pooled seed sets into two halves (each unordered split once; a seeded sample of
    :data:`MAX_SPLITS` where there are more), judged three ways."""
    pooled, lrs = pooled_losses(runs, a, b, loss_column)
    half = pooled.shape[0] // 2
    if half < 2:
        raise ValueError(
            f"A/A calibration of {a!r} and {b!r} needs at least 4 complete seed sets, got {pooled.shape[0]}"
        )
    first, second, sampled = _splits(2 * half, half, np.random.default_rng(0))  # an odd one out is left out
    found, differs = _judge(pooled, first, second)
    return Calibration(
        a,
        b,
        pooled.shape[0],
        half,
        len(first),
        lrs,
        {method: int(found[method].size) for method in METHODS},
        {method: int(found[method].sum()) for method in METHODS},
        int(differs.sum()),
        sampled,
        seed_sets_beyond_the_pool(runs, a, b),
    )


def rates_at_seeds(runs: pd.DataFrame, a: str, b: str, loss_column: str) -> list[RatesAtSeeds]:
    """For each of :data:`RATES_AT_SEEDS` the pool can split into two halves of: the false-positive rate of
    every test a claim uses (the paired t after each LR selection, and the exact sign-flip after the default
    selection), over random pairs of disjoint halves of that many seed sets (seeded)."""
    pooled, _ = pooled_losses(runs, a, b, loss_column)
    rates = []
    for seeds in RATES_AT_SEEDS:
        if 2 * seeds > pooled.shape[0]:
            continue
        first, second, _ = _splits(pooled.shape[0], seeds, np.random.default_rng(seeds))
        found, differs = _judge(pooled, first, second, sign_flip=True)
        rates.append(
            RatesAtSeeds(
                seeds,
                len(first),
                {method: int(found[method].size) for method in found},
                {method: int(found[method].sum()) for method in found},
                min(1.0, math.ldexp(1.0, 1 - seeds)),
                int(differs.sum()),
                int(found["cross_fitted"][differs].sum()),
            )
        )
    return rates


def _percent(share: float) -> str:
    """``0.049`` as ``4.9 %``, the reports' spelling."""
    return f"{share:.1%}".replace("%", " %")


def _count(number: int) -> str:
    return f"{number:,}" if number < 10**12 else f"more than 10^{len(str(number)) - 1}"


def calibration_block(calibration: Calibration, runs: int, by_seeds: list[RatesAtSeeds] = ()) -> str:
    """The Markdown that docs/results.md quotes: the false-positive rates beside the nominal 5 %, and (given
    ``by_seeds``) the same at 3, 5, 8 and 10 seeds per arm, where the pool allows."""
    c = calibration
    how = (
        f"split at random into two halves of {c.half} ({c.splits} splits drawn, seeded, of "
        f"{_count(math.comb(2 * c.half, c.half) // 2)})"
        if c.sampled
        else f"split every way into two halves of {c.half}, paired in seed order: {c.splits} splits"
    )
    left_out = (
        f"; the first {MAX_SEED_SETS_PER_VARIANT} of each variant's, {c.left_out} more left out" if c.left_out else ""
    )
    lines = [
        f"A/A calibration from {runs} runs: the seed sets of `{c.a}` and `{c.b}` (one configuration{left_out}) pooled "
        f"({c.seed_sets}, each with its runs at LRs {', '.join(format_lr(lr) for lr in c.lrs)}) and {how}, "
        "each one A/A comparison. A false positive is a 95 % interval that excludes 0.",
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
    if by_seeds:
        lines += [
            "",
            "By seeds per arm (random pairs of disjoint halves of the pool, seeded; the sign-flip test after the "
            "default selection, p < 0.05, cannot reject below 6 seeds: its floor is 2 / 2^n):",
            "",
            "| seeds per arm | splits | " + " | ".join(BY_SEEDS_LABELS.values()) + " | sign-flip floor | "
            "halves' best LRs differ | paired t, best LR on the other seeds, where they differ |",
            "|---|---|" + "---|" * len(BY_SEEDS_LABELS) + "---|---|---|",
        ]
        for r in by_seeds:
            cells = " | ".join(_percent(r.rate(method)) for method in BY_SEEDS_LABELS)
            where = (
                f"{_percent(r.false_positives_where_differs / r.selection_differs)} of {r.selection_differs}"
                if r.selection_differs
                else "n/a (never)"
            )
            differ = _percent(r.selection_differs / r.splits)
            lines.append(f"| {r.seeds} | {r.splits} | {cells} | {r.sign_flip_floor:.4g} | {differ} | {where} |")
    return "\n".join(lines)


#: The columns of the by-seeds table: each test a claim uses, after its LR selection.
BY_SEEDS_LABELS = {
    "cross_fitted": "paired t, best LR on the other seeds",
    "sign_flip": "sign-flip, best LR on the other seeds",
    "in_sample": "paired t, in-sample best LR",
    "same_lr": "paired t, same LR",
}
