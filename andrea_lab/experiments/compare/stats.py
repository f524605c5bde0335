"""Is variant A better than variant B, or is the gap within seed noise? Pure statistics on run tables.

Why paired: ``andrea sweep`` gives every variant the same seeds, and the same seed means the same batches
and initialisation. Much of the seed-to-seed spread is shared by both variants, so the honest unit of
evidence is the per-seed difference A − B; an unpaired comparison would drown real gaps in shared noise.

Why a t-interval: with 2–4 seeds the standard deviation is itself barely known. ``mean ± t(0.975, n−1) ·
sd / √n`` widens accordingly (t = 12.7 at n = 2), where a normal quantile or a bootstrap would claim
differences that two seeds cannot support. The known answers are in ``shared/design/STATISTICS.md``.

Why capped losses (Wortsman et al. 2023): a diverged run counts as ``min(loss, loss at init)`` so that one
blow-up cannot dominate a mean, and the same capped values give the LR sensitivity (mean over the LR grid
minus its best value). A capped mean mixes two things, how often a variant gets stuck and how well it
trains when it does not, so the ``trained`` column (the loss of the runs that did not diverge) and the
divergence counts (:mod:`andrea_lab.experiments.compare.divergence`) keep them apart.

Why best LRs are chosen on other seeds (:mod:`andrea_lab.experiments.compare.selection`): the LR with the lowest mean
over the very seeds that are then compared favours each variant on exactly those seeds (the winner's
curse); at a divergence cliff the in-sample interval can look decisive where the held-out choice lands on
the cliff. :class:`Comparison` carries both; the cross-fitted one is the default.

Sign convention: lower loss is better, so A − B < 0 means A is better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from andrea_lab.experiments.compare.heldout_columns import SELECTION_LOSS, TEST_LOSS
from andrea_lab.experiments.compare.outcomes import with_outcomes
from andrea_lab.experiments.compare.sign_flip import (  # noqa: F401  (stats is where callers find the tests)
    AS_EXTREME,
    EXACT_FLIPS_MAX_SEEDS,
    RANDOM_FLIPS,
    SignFlipP,
    every_sign_flip,
    sign_flip_p,
    sign_flip_test,
)
from andrea_lab.runs.directory import DONE_STATES, NONFINITE, format_lr

#: The column of counted runs whose capped loss chooses (an LR, an optimum) where it differs from the judged one.
CHOICE = "capped_choice"
#: The score that chooses for a judged score: the held-out test part is judged, its selection part chooses.
SELECTION_FOR = {TEST_LOSS: SELECTION_LOSS}

CONFIDENCE = 0.95
VERDICTS = ("better", "worse", "not detected")
#: Below this many paired seeds an interval is so wide that "not detected" mostly means "run more seeds".
MIN_SEEDS = 3
TOO_FEW_SEEDS = "n < 3: too few seeds"
#: Only these runs count; interrupted or failed runs say nothing about the variant.
COUNTED_STATUSES = DONE_STATES
#: A non-finite blow-up may come after the last validation, so that validation loss is not trusted.
NONFINITE_KIND = NONFINITE


#: The most duplicated cells an error names (the rest are counted).
LISTED_AT_MOST = 5


def _signed(value: float, digits: int) -> str:
    """``+0.120`` / ``−0.120`` (a true minus sign, as in the reports), ``+inf``, ``nan``."""
    return f"{value:+.{digits}f}".replace("-", "−") if not math.isnan(value) else "nan"


def capped_loss(loss: Optional[float], loss_at_init: float) -> float:
    """``min(loss, loss_at_init)``; a missing, NaN or infinite loss (a diverged run) counts as ``loss_at_init``."""
    if loss is None or not math.isfinite(loss):
        return float(loss_at_init)
    return float(min(loss, loss_at_init))


@dataclass(frozen=True)
class PairedDifference:
    """Mean of the per-seed differences A − B with its paired-t interval ``[low, high]``."""

    mean: float
    low: float
    high: float
    n: int
    differences: tuple[float, ...]

    @property
    def verdict(self) -> str:
        """ "better"/"worse" only when the whole interval is on one side of 0; a NaN interval decides nothing."""
        if self.high < 0:
            return "better"
        if self.low > 0:
            return "worse"
        return "not detected"

    @property
    def too_few_seeds(self) -> bool:
        return self.n < MIN_SEEDS

    @property
    def p_value(self) -> float:
        """Two-sided paired t-test of mean 0 (the same t as the interval: p < 0.05 exactly when the 95 %
        interval excludes 0). NaN below two seeds; 0 or 1 for identical differences (sd = 0)."""
        return paired_t_p(self.differences)

    def describe(self, digits: int = 3) -> str:
        return f"{_signed(self.mean, digits)} [{_signed(self.low, digits)}, {_signed(self.high, digits)}], n={self.n}"


def paired_t_p(differences: Sequence[float]) -> float:
    """Two-sided p of a one-sample t-test of ``differences`` against 0."""
    n = len(differences)
    if n < 2:
        return math.nan
    mean, sd = float(np.mean(differences)), float(np.std(differences, ddof=1))
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * scipy_stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def tost_p(differences: Sequence[float], margin: float) -> float:
    """Two one-sided t-tests of |mean difference| < ``margin``: the larger of the two one-sided p-values
    (p < 0.05 exactly when the 90 % t interval lies inside ±margin). NaN below two seeds."""
    n = len(differences)
    if n < 2:
        return math.nan
    mean, sd = float(np.mean(differences)), float(np.std(differences, ddof=1))
    if sd == 0:
        return 0.0 if abs(mean) < margin else 1.0
    se = sd / math.sqrt(n)
    return float(max(scipy_stats.t.sf((mean + margin) / se, n - 1), scipy_stats.t.sf((margin - mean) / se, n - 1)))


def t_interval(differences: Sequence[float], confidence: float) -> tuple[float, float]:
    """The t interval of the differences' mean at ``confidence``; (NaN, NaN) below two seeds."""
    n = len(differences)
    if n < 2:
        return math.nan, math.nan
    mean, sd = float(np.mean(differences)), float(np.std(differences, ddof=1))
    half_width = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return mean - half_width, mean + half_width


def paired_difference(a: Mapping[int, float], b: Mapping[int, float]) -> PairedDifference:
    """A − B paired by seed: the seeds both have, pairs with a NaN on either side dropped.

    n = 0 gives NaN everywhere; n = 1 gives an unbounded interval (one seed shows no spread); identical
    differences (sd = 0, e.g. bit-identical runs) give the point interval ``[mean, mean]``.
    """
    a, b = {k: float(v) for k, v in a.items()}, {k: float(v) for k, v in b.items()}  # a Series too
    seeds = sorted(seed for seed in a.keys() & b.keys() if not (math.isnan(a[seed]) or math.isnan(b[seed])))
    differences = tuple(a[seed] - b[seed] for seed in seeds)
    n = len(differences)
    if n == 0:
        return PairedDifference(math.nan, math.nan, math.nan, 0, ())
    mean = float(np.mean(differences))
    if n == 1:
        return PairedDifference(mean, -math.inf, math.inf, 1, differences)
    sd = float(np.std(differences, ddof=1))
    half_width = float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n) if sd > 0 else 0.0
    return PairedDifference(mean, mean - half_width, mean + half_width, n, differences)


def best_lr(capped_by_lr_seed: pd.DataFrame) -> float:
    """The LR (index) with the lowest mean capped loss over seeds (columns); ties go to the smaller LR."""
    means = capped_by_lr_seed.mean(axis=1, skipna=True).dropna().sort_index()
    if means.empty:
        raise ValueError("best_lr needs at least one learning rate with a loss")
    return float(means.index[int(np.argmin(means.to_numpy()))])  # argmin: first, i.e. smallest, LR


def lr_sensitivity_per_seed(capped_by_lr_seed: pd.DataFrame) -> pd.Series:
    """Per seed: mean over the LR grid minus its minimum (Wortsman et al. 2023); 0 = every LR is as good.

    A seed missing any LR of the grid gets NaN: over a partial grid the number would not be comparable.
    """
    mean = capped_by_lr_seed.mean(axis=0, skipna=False)
    return (mean - capped_by_lr_seed.min(axis=0, skipna=False)).rename("lr_sensitivity")


def edge_flag(best: float, lrs: Sequence[float]) -> Optional[str]:
    """A best LR at the edge of the grid may not be the optimum at all: say which way to extend the grid."""
    grid = sorted(set(float(lr) for lr in lrs))
    if len(grid) < 2:
        return None
    if best == grid[0]:
        return f"optimum not bracketed: extend lrs below {format_lr(best)}"
    if best == grid[-1]:
        return f"optimum not bracketed: extend lrs above {format_lr(best)}"
    return None


def fisher_divergence(diverged_a: int, runs_a: int, diverged_b: int, runs_b: int) -> float:
    """Two-sided Fisher exact p on diverged/not-diverged × A/B (unpaired: for counts, not losses)."""
    for diverged, runs in ((diverged_a, runs_a), (diverged_b, runs_b)):
        if not 0 <= diverged <= runs:
            raise ValueError(f"{diverged} diverged out of {runs} runs is not a count")
    if diverged_a == 0 and diverged_b == 0:
        return 1.0
    table = [[diverged_a, runs_a - diverged_a], [diverged_b, runs_b - diverged_b]]
    return float(scipy_stats.fisher_exact(table, alternative="two-sided").pvalue)


# ====================================================================== from run tables


#: The state of a finished run set aside because it has no held-out score while others have one: counting
#: it by another loss would mix two measurements, counting it at its loss at init would call it diverged.
NO_HELDOUT_SCORE = "no held-out score"


def set_aside_unscored(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with every counted run that lacks a held-out loss (``--heldout.enabled false``, or a run from
    before the held-out evaluation) marked :data:`NO_HELDOUT_SCORE`, when any other counted run has one: the
    comparison then scores the held-out loss of the rest and its notes name the runs set aside. A diverged
    run keeps its state (it counts at its loss at init whatever it measured)."""
    if "heldout_loss" not in runs:
        return runs
    counted = runs["status"].isin(COUNTED_STATUSES)
    scored = pd.to_numeric(runs["heldout_loss"], errors="coerce").notna()
    if not (counted & scored).any():
        return runs
    unscored = counted & ~scored & (runs["status"] != "diverged")
    if not unscored.any():
        return runs
    runs = runs.copy()
    runs.loc[unscored, "status"] = NO_HELDOUT_SCORE
    return runs


def _refuse_unscored(counted: pd.DataFrame, loss: pd.Series, loss_column: str) -> None:
    """A finished run without the scored loss cannot be counted at its loss at init (that is a diverged run's
    score): name the runs, say what to do."""
    missing = counted.loc[loss.isna() & (counted["status"] != "diverged")]
    if missing.empty:
        return
    where = "; ".join(str(path) for path in missing["path"]) if "path" in missing else f"{len(missing)} runs"
    raise ValueError(
        f"{len(missing)} finished run(s) have no {loss_column.replace('_', ' ')} to score: {where} "
        "(evaluate them again, e.g. `andrea validate`, or move them out of the directory compared)"
    )


def counted_runs(runs: pd.DataFrame, loss_column: str) -> pd.DataFrame:
    """Counted runs with ``capped``, ``diverged`` and ``trained`` (the loss of a run that did not diverge, NaN
    for one that did) columns; one row per (variant, lr, seed). A finished run without the scored loss is
    refused, named (:func:`set_aside_unscored` sets aside those a held-out comparison cannot score).

    ``diverged`` is one of the three failures (stuck, regressed, blew_up: :func:`outcomes.with_outcomes`, which
    also adds a column for each); a run whose rise came back by its end is a spike, counted as trained."""
    counted = with_outcomes(runs[runs["status"].isin(COUNTED_STATUSES)])
    loss = pd.to_numeric(counted[loss_column], errors="coerce").astype(float)
    _refuse_unscored(counted, loss, loss_column)
    cause = counted["divergence_cause"] if "divergence_cause" in counted else pd.Series(None, index=counted.index)
    loss = loss.where((counted["divergence_kind"] != NONFINITE_KIND) & (cause != NONFINITE_KIND), math.nan)
    counted["capped"] = [capped_loss(value, init) for value, init in zip(loss, counted["initial_val_loss"])]
    if (choice_column := SELECTION_FOR.get(loss_column)) is not None and choice_column in counted:
        choice = pd.to_numeric(counted[choice_column], errors="coerce").astype(float).where(loss.notna(), math.nan)
        counted[CHOICE] = [capped_loss(value, init) for value, init in zip(choice, counted["initial_val_loss"])]
    counted["diverged"] = counted["failed"]
    counted["trained"] = loss.where(~counted["diverged"], math.nan)
    duplicated = counted.duplicated(["variant", "lr", "seed"], keep=False)
    if duplicated.any():
        cells = sorted(
            {
                (str(v), float(lr), -1 if pd.isna(seed) else int(seed))
                for v, lr, seed in counted.loc[duplicated, ["variant", "lr", "seed"]].itertuples(index=False, name=None)
            }
        )
        listed = "; ".join(f"{v} at LR {lr:g}, seed {seed}" for v, lr, seed in cells[:LISTED_AT_MOST])
        if len(cells) > LISTED_AT_MOST:  # one line, whatever the table holds (a handed CSV of a million rows)
            listed += f" (and {len(cells) - LISTED_AT_MOST:,} more)"
        raise ValueError(
            f"more than one finished run of {listed}: keep one run per variant, LR and seed "
            "(move the others out of the directory compared)"
        )
    return counted


def check_known(names: Sequence[str], runs: pd.DataFrame) -> None:
    known = sorted(set(runs["variant"]))
    for name in names:
        if name not in known:
            raise ValueError(f"unknown variant {name!r}; known variants: {', '.join(known)}")


def loss_table(counted: pd.DataFrame, variant: str, values: str = "capped") -> pd.DataFrame:
    """One variant's ``capped`` (or ``trained``) losses: index lr, columns seeds."""
    rows = counted[counted["variant"] == variant]
    return rows.pivot(index="lr", columns="seed", values=values).sort_index()


def choice_table(counted: pd.DataFrame, variant: str) -> pd.DataFrame:
    """One variant's capped losses that *choose* (its best LR, an optimum's edge): the selection part's of the
    held-out documents where the runs recorded it (andrea_lab.data.judging_split), else the judged ones."""
    return loss_table(counted, variant, CHOICE if CHOICE in counted else "capped")


# Cross-fitting (leave-one-seed-out): why, and the fixed-LR alternative, in andrea_lab.experiments.compare.selection.


def held_out_best_lrs(table: pd.DataFrame) -> dict[int, float]:
    """Per seed (column of ``table``, index lr): the best LR over the other seeds (as :func:`best_lr` chooses
    it: the lowest mean, ties to the smaller LR); NaN for a seed that has no other seed with a loss (one seed
    cannot choose for itself without choosing on itself).

    Every seed's "mean over the others" comes from one sum over all seeds less its own: linear in the
    number of seeds (dropping each seed's column in turn made a handed table of 6,000 seeds take hours)."""
    ordered = table.sort_index()
    values = ordered.to_numpy(dtype=float)  # (LRs, seeds)
    present = ~np.isnan(values)
    filled = np.where(present, values, 0.0)
    others_count = present.sum(axis=1, keepdims=True) - present
    with np.errstate(invalid="ignore", divide="ignore"):
        others_mean = np.where(
            others_count > 0, (filled.sum(axis=1, keepdims=True) - filled) / np.maximum(others_count, 1), np.nan
        )
    picks: dict[int, float] = {}
    for column, seed in enumerate(ordered.columns):
        means = others_mean[:, column]
        chosen = np.flatnonzero(means == np.nanmin(means))[:1] if not np.isnan(means).all() else ()
        picks[int(seed)] = float(ordered.index[chosen[0]]) if len(chosen) else math.nan
    return picks


def values_at(table: pd.DataFrame, lrs: Mapping[int, float]) -> dict[int, float]:
    """Each seed's value at its own LR (``lrs[seed]``); NaN where that LR or seed was not run."""
    values = {}
    for seed, lr in lrs.items():
        inside = not math.isnan(lr) and lr in table.index and seed in table.columns
        values[seed] = float(table.at[lr, seed]) if inside else math.nan
    return values


def difference_at(
    table_a: pd.DataFrame, table_b: pd.DataFrame, lrs_a: Mapping[int, float], lrs_b: Mapping[int, float]
) -> PairedDifference:
    """A − B paired by seed, each seed of each variant at its own LR (``lrs_*[seed]``)."""
    return paired_difference(values_at(table_a, lrs_a), values_at(table_b, lrs_b))


@dataclass(frozen=True)
class Comparison:
    """One variant against the reference: at best LRs (chosen on the other seeds, and in-sample), at each
    shared LR, LR sensitivity, divergences."""

    variant: str
    reference: str
    at_best: PairedDifference  # in-sample: each best LR chosen on the seeds compared (secondary)
    variant_best_lr: float
    reference_best_lr: float
    per_lr: dict[float, PairedDifference]
    sensitivity: PairedDifference  # Wortsman's, per seed: no choice across seeds, so nothing to cross-fit
    divergence_p: dict[float, float]
    flags: tuple[str, ...]
    cross_fitted: Optional[PairedDifference] = None  # each seed at the LRs chosen on the other seeds
    cross_fitted_lrs: tuple[dict, dict] = ({}, {})  # those LRs per seed: (variant's, reference's)


def compare_pair(counted: pd.DataFrame, variant: str, reference: str) -> Comparison:
    table_a, table_b = loss_table(counted, variant), loss_table(counted, reference)
    choose_a, choose_b = choice_table(counted, variant), choice_table(counted, reference)
    # Best LRs from the seeds both have, so a seed that only one variant ran cannot move the choice.
    seeds = table_a.columns.intersection(table_b.columns)
    if seeds.empty:
        raise ValueError(f"{variant!r} and {reference!r} have no seed in common: nothing to pair")
    best_a, best_b = best_lr(choose_a[seeds]), best_lr(choose_b[seeds])
    shared_lrs = table_a.index.intersection(table_b.index)
    per_lr = {float(lr): paired_difference(table_a.loc[lr], table_b.loc[lr]) for lr in shared_lrs}
    # Sensitivity is a property of the grid: only between variants run on the same one (with its own LR grid a
    # variant has another, and the few LRs two grids share would measure neither's sensitivity).
    same_grid = set(table_a.index) == set(table_b.index) and len(shared_lrs) > 1
    sensitivity = (
        paired_difference(lr_sensitivity_per_seed(table_a), lr_sensitivity_per_seed(table_b))
        if same_grid
        else PairedDifference(math.nan, math.nan, math.nan, 0, ())
    )
    picks_a, picks_b = held_out_best_lrs(choose_a[seeds]), held_out_best_lrs(choose_b[seeds])
    divergence_p = {}
    for lr in shared_lrs:
        at_lr = counted[counted["lr"] == lr]
        diverged_a = at_lr.loc[at_lr["variant"] == variant, "diverged"]
        diverged_b = at_lr.loc[at_lr["variant"] == reference, "diverged"]
        divergence_p[float(lr)] = fisher_divergence(
            int(diverged_a.sum()), len(diverged_a), int(diverged_b.sum()), len(diverged_b)
        )
    at_best = paired_difference(table_a.loc[best_a], table_b.loc[best_b])
    cross_fitted = difference_at(table_a, table_b, picks_a, picks_b)
    flags = [
        f"{name}: {flag}"
        for name, best, table in ((variant, best_a, table_a), (reference, best_b, table_b))
        if (flag := edge_flag(best, table.index))
    ]
    if cross_fitted.too_few_seeds:
        flags.append(TOO_FEW_SEEDS)
    return Comparison(
        variant,
        reference,
        at_best,
        best_a,
        best_b,
        per_lr,
        sensitivity,
        divergence_p,
        tuple(flags),
        cross_fitted,
        (picks_a, picks_b),
    )


def compare_variants(runs: pd.DataFrame, reference: str, loss_column: str = "final_val_loss") -> dict[str, Comparison]:
    """Every other variant of ``runs`` (one row per run, as in ``runs.csv``) against ``reference``."""
    check_known([reference], runs)
    counted = counted_runs(runs, loss_column)
    variants = [v for v in dict.fromkeys(runs["variant"]) if v != reference and v in set(counted["variant"])]
    if reference not in set(counted["variant"]):
        raise ValueError(f"reference {reference!r} has no finished or diverged run")
    return {variant: compare_pair(counted, variant, reference) for variant in variants}
