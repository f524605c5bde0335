"""What a claim of this proxy measured: the kind of quantity its verdict counted, and the model, tokens and metric
it was measured on, printed beside the published result it is held against
(:mod:`andrea_lab.experiments.compare.published`).

Why from the runs and not from the claim's name: ``fewer_divergences`` counts any failure, and which failures
they were decides what it measured (every divergence behind the committed verdicts was a run stuck on the
unigram plateau, not a blow-up; issue 56). A loss claim at a fixed LR where most runs of a side never left the
plateau measures the plateau, not a trained model's loss (norm_placement_confirm: pre − post = −0.851 at 4e-3,
post stuck 9/10): its kind is ``loss vs plateau``, which matches no paper's ``loss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import pandas as pd

from andrea_lab.experiments.compare.claim_spec import COUNT_KINDS, Claim
from andrea_lab.experiments.compare.divergence import FAILURE_LABELS, mostly_stuck

#: A loss difference where a side mostly sat on the unigram plateau (the plateau's height, in nats).
LOSS_VS_PLATEAU = "loss vs plateau"
#: The kinds that are a loss at the end of training.
LOSS_KINDS = ("lower_loss", "lower_loss_trained", "equivalent_loss")
_GRID_QUANTITIES = {
    "lower_sensitivity": "lr_sensitivity",
    "sensitivity_gap_grows": "lr_sensitivity",
    "higher_ceiling": "lr_ceiling",
}


@dataclass(frozen=True)
class Setup:
    """What one variant trains: non-embedding parameters and tokens (counted by the sweep's planner from the
    suite file: andrea_lab.experiments.sweep.ladder_compute)."""

    parameters: int
    tokens: int


def _failures(counted: pd.DataFrame, claim: Claim) -> str:
    """The failures a ``fewer_divergences`` claim counted, by kind (``stuck``, ``stuck+blew_up``), over its
    grid or at its fixed LRs; ``none failed`` when no run of either side failed."""
    rows = counted[counted["variant"].isin([claim.a, claim.b])]
    if claim.lrs is not None:
        fixed = {claim.a: claim.lrs[0], claim.b: claim.lrs[1]}
        rows = rows[rows["lr"] == rows["variant"].map(fixed)]
    kinds = [column for column, _ in FAILURE_LABELS if column in rows and rows[column].astype(bool).any()]
    return "+".join(kinds) or "none failed"


def measured_kind(claim: Claim, counted: pd.DataFrame) -> str:
    """The kind of quantity ``claim`` counted on ``counted`` (compare.stats.counted_runs, with the outcome
    columns): ``loss``, ``loss vs plateau``, ``stuck``, ``regressed``, ``blew_up`` (or several, joined by +),
    ``lr_sensitivity`` or ``lr_ceiling``."""
    if claim.kind == "fewer_divergences":
        return _failures(counted, claim)
    if claim.kind in COUNT_KINDS:
        return COUNT_KINDS[claim.kind]
    if claim.kind in _GRID_QUANTITIES:
        return _GRID_QUANTITIES[claim.kind]
    if claim.kind != "lower_loss_trained" and claim.lrs is not None:
        if mostly_stuck(counted, {claim.a: claim.lrs[0], claim.b: claim.lrs[1]}):
            return LOSS_VS_PLATEAU
    return "loss"


def _millions(count: int) -> str:
    return f"{count / 1e6:.2g}M"


def _figure(setups: Mapping[str, Setup], claim: Claim, field: str) -> Optional[str]:
    """One figure for both sides when they share it, ``A x / B y`` when not; None when either is unknown."""
    if claim.a not in setups or claim.b not in setups:
        return None
    a, b = (_millions(getattr(setups[name], field)) for name in (claim.a, claim.b))
    return a if a == b else f"{claim.a} {a} / {claim.b} {b}"


def describe_ours(claim: Claim, setups: Mapping[str, Setup], scored: str) -> str:
    """``0.3M non-embedding params, 0.51M tokens, held-out loss (document-weighted), nats/token`` for a loss
    claim; a count names the runs it counted instead of the metric. ``scored``: the loss the suite is scored
    on, in words (compare.report.scored_name)."""
    kind = measured_kind_name(claim)
    metric = f"{scored}, nats/token" if kind == "loss" else kind
    parameters, tokens = _figure(setups, claim, "parameters"), _figure(setups, claim, "tokens")
    size = "model size not counted" if parameters is None else f"{parameters} non-embedding params, {tokens} tokens"
    return f"{size}, {metric}"


def measured_kind_name(claim: Claim) -> str:
    """What the claim's metric is, from its kind alone: ``loss``, ``runs counted by outcome``, or the grid
    quantity's name."""
    if claim.kind in LOSS_KINDS:
        return "loss"
    if claim.kind in COUNT_KINDS:
        return "runs counted by outcome (exact McNemar)"
    return _GRID_QUANTITIES.get(claim.kind, claim.kind).replace("_", " ") + " of the held-out loss"
