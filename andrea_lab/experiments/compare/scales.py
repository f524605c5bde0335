"""A suite with a scale axis (:mod:`andrea_lab.experiments.sweep.scales`) compared: one ordinary report per scale, and
the trend across scales.

Why per scale and not pooled: a run at d_model 64 and one at 128 with the same seed are not a pair (they
start from different weights), and the best LR moves with width. So each scale's runs are an ordinary
comparison of their own — the same report as a suite without the axis, in ``<out>/<scale>/`` — and every
claim is judged at each scale by the very functions that judge it without the axis
(:func:`andrea_lab.experiments.compare.compare.claims_table`, hence
:func:`andrea_lab.experiments.compare.claims.evaluate_claims`).
What the axis adds is the trend (Wortsman et al. 2023, Figure 1): the claims' outcomes and intervals side
by side per scale, each variant's LR sensitivity per scale, and the figures of
:mod:`andrea_lab.experiments.compare.plots_scales`; and the claims about the trend itself
(:func:`judge_across_scales`: "A's LR sensitivity minus B's grows with scale"), the interaction that a claim
at each scale cannot test: "reproduced at the largest scale, not detected at the smallest" is no evidence
that the gap grew.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd
from scipy import stats as scipy_stats

from andrea_lab.experiments.compare import compare, report, stats
from andrea_lab.experiments.compare.claim_spec import ACROSS_SCALES
from andrea_lab.experiments.compare.claims import ClaimResult, format_p, outcome_of, parse_claims
from andrea_lab.experiments.compare.compare import Column
from andrea_lab.experiments.compare.multiplicity import holm
from andrea_lab.experiments.compare.runs_table import SCALE, SCALE_INDEX
from andrea_lab.runs.directory import format_lr

NOT_JUDGED = "n/a"


def has_scales(runs: pd.DataFrame) -> bool:
    """Whether the runs come from a suite with a scale axis (their ``scale`` column is set)."""
    return SCALE in runs and runs[SCALE].notna().any()


def scale_order(runs: pd.DataFrame) -> list[str]:
    """Scales in their suite's order (``scale_index`` from the sweep), else in the order first seen."""
    scaled = runs[runs[SCALE].notna()]
    first_seen = list(dict.fromkeys(scaled[SCALE]))
    if SCALE_INDEX not in scaled:
        return first_seen
    index = scaled.groupby(SCALE, sort=False)[SCALE_INDEX].min()
    return sorted(
        first_seen, key=lambda name: (math.inf if pd.isna(index[name]) else float(index[name]), first_seen.index(name))
    )


def scale_subsets(runs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(scale, its runs)`` in scale order."""
    return [(scale, runs[runs[SCALE] == scale]) for scale in scale_order(runs)]


def judgeable(raw_claims: Sequence[Any], runs: pd.DataFrame) -> list[tuple[Any, Optional[str]]]:
    """Each raw claim judged at one scale with None, or why it cannot be judged on these runs (a variant
    without counted runs); claims across scales are left out (:func:`judge_across_scales`)."""
    counted = set(runs.loc[runs["status"].isin(stats.COUNTED_STATUSES) & runs["lr"].notna(), "variant"])
    judged = []
    for raw in raw_claims:
        claim = parse_claims([raw])[0]  # a claim at several fixed LRs parses into one per LR: same variants
        if claim.kind in ACROSS_SCALES:
            continue
        missing = [name for name in (claim.a, claim.b) if name not in counted]
        judged.append((raw, f"no finished or diverged run of {', '.join(missing)} at this scale" if missing else None))
    return judged


def claims_by_scale(runs: pd.DataFrame, raw_claims: Sequence[Any], loss_column: str) -> pd.DataFrame:
    """Every claim judged at every scale, one row per (claim, scale): :func:`compare.claims_table` on that
    scale's runs, all the claims judgeable there in one call, so that each scale is one multiplicity family
    (Holm over the claims judged at that scale); plus ``scale``. A claim one of whose variants has no run at
    a scale is ``n/a`` there."""
    frames = []
    for scale, subset in scale_subsets(runs):
        judged = judgeable(raw_claims, subset)
        ready = [raw for raw, missing in judged if missing is None]
        if ready:
            frames.append(compare.claims_table(subset, ready, loss_column).assign(scale=scale))
        for raw, missing in judged:
            if missing is not None:
                claim = parse_claims([raw])[0]
                frames.append(
                    pd.DataFrame(
                        [
                            {
                                "claim": f"{claim.kind}: {claim.a} vs {claim.b}",
                                "text": claim.text,
                                "outcome": NOT_JUDGED,
                                "evidence": missing,
                                "scale": scale,
                            }
                        ]
                    )
                )
    if not frames:
        return pd.DataFrame(columns=["claim", "text", "scale", "outcome", "evidence"])
    joined = pd.concat(frames, ignore_index=True)
    first_seen = {key: i for i, key in reversed(list(enumerate(zip(joined["claim"], joined["text"]))))}
    order = [first_seen[key] for key in zip(joined["claim"], joined["text"])]
    return (
        joined.assign(_order=order)
        .sort_values("_order", kind="stable")[["claim", "text", "scale", "outcome", "evidence"]]
        .reset_index(drop=True)
    )


def sensitivity_gaps(runs: pd.DataFrame, a: str, b: str, loss_column: str) -> list[tuple[str, stats.PairedDifference]]:
    """Per scale where both ran on the same LR grid: A's LR sensitivity minus B's, paired by seed within the
    scale (the same per-seed sensitivity as ``lower_sensitivity``)."""
    gaps = []
    for scale, subset in scale_subsets(runs):
        counted = stats.counted_runs(subset, loss_column)
        if not {a, b} <= set(counted["variant"]):
            continue
        table_a, table_b = stats.loss_table(counted, a), stats.loss_table(counted, b)
        if set(table_a.index) != set(table_b.index) or len(table_a.index) < 2:
            continue
        gaps.append(
            (
                scale,
                stats.paired_difference(stats.lr_sensitivity_per_seed(table_a), stats.lr_sensitivity_per_seed(table_b)),
            )
        )
    return gaps


@dataclass(frozen=True)
class GapTrend:
    """The least-squares slope of the per-seed sensitivity gaps against the scale's position (0, 1, 2, ... in
    the suite's order): its 95 % interval and two-sided t-test p with n - 2 degrees of freedom."""

    slope: float
    low: float
    high: float
    p: float
    n: int


def gap_trend(gaps: Sequence[tuple[str, stats.PairedDifference]]) -> GapTrend:
    """Seeds are not paired across scales (another width is another initialisation), so every seed's gap is
    one observation at its scale's position, and the trend is an ordinary regression over them."""
    x = [position for position, (_, gap) in enumerate(gaps) for _ in gap.differences]
    y = [float(value) for _, gap in gaps for value in gap.differences]
    if len(set(x)) < 2 or len(y) < 3:
        return GapTrend(math.nan, math.nan, math.nan, math.nan, len(y))
    fit = scipy_stats.linregress(x, y)
    half = float(scipy_stats.t.ppf(0.975, len(y) - 2)) * float(fit.stderr)
    return GapTrend(float(fit.slope), fit.slope - half, fit.slope + half, float(fit.pvalue), len(y))


def across_results(runs: pd.DataFrame, raw_claims: Sequence[Any], loss_column: str) -> list[ClaimResult]:
    """Every claim about the trend across scales judged (unadjusted): ``sensitivity_gap_grows: [A, B]`` favours
    its claim when the slope of (A's LR sensitivity - B's) over the scales is positive."""
    results = []
    for claim in (claim for claim in parse_claims(list(raw_claims)) if claim.kind in ACROSS_SCALES):
        gaps = sensitivity_gaps(runs, claim.a, claim.b, loss_column)
        trend = gap_trend(gaps)
        per_scale = "; ".join(f"{scale} {gap.describe()}" for scale, gap in gaps) or "no scale with both on one grid"
        side = None if math.isnan(trend.slope) or trend.slope == 0 else trend.slope > 0
        slope = (
            "too few seeds or scales for a slope"
            if math.isnan(trend.slope)
            else f"slope {trend.slope:+.3f} [{trend.low:+.3f}, {trend.high:+.3f}] per scale step (n={trend.n} seeds)"
        )
        evidence = f"{claim.a} − {claim.b} in LR sensitivity: {per_scale}; {slope}"
        results.append(ClaimResult(claim, outcome_of(side, trend.p), evidence, trend.p, favours_a=side))
    return results


def judge_across_scales(runs: pd.DataFrame, raw_claims: Sequence[Any], loss_column: str) -> pd.DataFrame:
    """Every claim about the trend across scales (:func:`across_results`), as one Holm family of its own:
    reproduced when the slope is positive at Holm-adjusted p < 0.05, contradicted when negative."""
    results = across_results(runs, raw_claims, loss_column)
    rows = [
        {"claim": r.claim.label, "text": r.claim.text, "evidence": r.evidence, "p": r.p, "_side": r.favours_a}
        for r in results
    ]
    frame = pd.DataFrame(rows, columns=["claim", "text", "evidence", "p", "_side"])
    frame["p_holm"] = holm(list(frame["p"])) if len(frame) else []
    frame["outcome"] = [outcome_of(side, p) for side, p in zip(frame["_side"], frame["p_holm"])]
    frame["p"], frame["p_holm"] = frame["p"].map(format_p), frame["p_holm"].map(format_p)
    return frame[["claim", "text", "outcome", "evidence", "p", "p_holm"]]


ACROSS_COLUMNS = [
    Column("claim", "claim", lambda r: r),
    Column("text", "hypothesis", lambda r: r),
    Column("outcome", "outcome", lambda r: r),
    Column("evidence", "evidence (95 % CIs per scale; the slope's t-test)", lambda r: r),
    Column("p", "p", lambda r: r),
    Column("p_holm", "Holm p (claims across scales)", lambda r: r),
]


def trend_table(by_scale: pd.DataFrame, scales: Sequence[str]) -> tuple[list[Column], pd.DataFrame]:
    """Claims as rows, one column per scale holding the outcome and its evidence (the paired difference with
    its interval, or the exact test) at that scale: how a verdict moves with size, at a glance."""
    rows = []
    for (claim, text), group in by_scale.groupby(["claim", "text"], sort=False):
        cells = {row.scale: f"{row.outcome}: {row.evidence}" for row in group.itertuples()}
        rows.append({"claim": claim, "text": text, **{scale: cells.get(scale, NOT_JUDGED) for scale in scales}})
    columns = [
        Column("claim", "claim", lambda r: r),
        Column("text", "hypothesis", lambda r: r),
        *[Column(scale, f"at {scale}", lambda r: r) for scale in scales],
    ]
    return columns, pd.DataFrame(rows, columns=[c.key for c in columns])


SCALE_VARIANT_COLUMNS = [  # over (scale, compare.Variant) pairs
    Column("scale", "scale", lambda sv: sv[0]),
    Column("variant", "variant", lambda sv: sv[1].name),
    Column("runs", "runs", lambda sv: len(sv[1].rows)),
    Column("best_lr", "best LR", lambda sv: sv[1].best_lr, format_lr),
    Column("loss_at_best_mean", "loss at best LR", lambda sv: float(sv[1].at_best.mean()), compare.fmt),
    Column("lr_sensitivity", "LR sensitivity", lambda sv: compare.mean_sd(sv[1].sensitivity)),
    Column("diverged", "failed", lambda sv: f"{int(sv[1].rows['diverged'].sum())}/{len(sv[1].rows)}"),
]


def variants_by_scale(plans: dict[str, dict[str, Any]]) -> list[tuple[str, compare.Variant]]:
    """``(scale, variant)`` of every scale's report, scales outermost (the items of :data:`SCALE_VARIANT_COLUMNS`)."""
    return [(scale, variant) for scale, plan in plans.items() for variant in plan["variants"]]


def _claims_at(raw_claims: Sequence[Any], runs: pd.DataFrame) -> list[Any]:
    return [raw for raw, missing in judgeable(raw_claims, runs) if missing is None]


def plan_scaled_suite(suite_runs: pd.DataFrame, reference: Optional[str], claims: Sequence[Any]) -> dict[str, Any]:
    """Every scale's report planned (:func:`report.plan_suite`) and the claims judged per scale, before anything
    is written; runs without a scale are left out with a note."""
    loss_column = compare.scored_loss_column(suite_runs)
    unscaled = suite_runs[suite_runs[SCALE].isna()]
    plans = {
        scale: report.plan_suite(subset, reference, _claims_at(claims, subset) if claims else ())
        for scale, subset in scale_subsets(suite_runs)
    }
    notes = [f"{scale}: {note}" for scale, plan in plans.items() for note in plan["notes"]]
    notes += [
        f"{row.variant}: left out {Path(row.path).name} (no scale, in a suite with a scale axis)"
        for row in unscaled.itertuples()
    ]
    scaled = suite_runs[suite_runs[SCALE].notna()]
    by_scale = claims_by_scale(scaled, claims, loss_column) if claims else None
    across = judge_across_scales(scaled, claims, loss_column) if claims else None
    return {
        "runs": suite_runs,
        "loss_column": loss_column,
        "scales": plans,
        "claims": by_scale,
        "across": across,
        "notes": notes,
    }
