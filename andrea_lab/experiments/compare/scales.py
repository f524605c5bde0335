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
:mod:`andrea_lab.experiments.compare.plots_scales`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import compare, report, stats
from andrea_lab.experiments.compare.claims import parse_claims
from andrea_lab.experiments.compare.compare import Column
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
    """Each raw claim with None, or why it cannot be judged on these runs (a variant without counted runs)."""
    counted = set(runs.loc[runs["status"].isin(stats.COUNTED_STATUSES) & runs["lr"].notna(), "variant"])
    judged = []
    for raw in raw_claims:
        claim = parse_claims([raw])[0]  # a claim at several fixed LRs parses into one per LR: same variants
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
    Column("diverged", "diverged", lambda sv: f"{int(sv[1].rows['diverged'].sum())}/{len(sv[1].rows)}"),
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
    by_scale = claims_by_scale(suite_runs[suite_runs[SCALE].notna()], claims, loss_column) if claims else None
    return {"runs": suite_runs, "loss_column": loss_column, "scales": plans, "claims": by_scale, "notes": notes}
