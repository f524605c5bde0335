"""Effects in steps: in what share of B's steps A reaches B's final held-out loss, paired by seed.

A loss difference at the end of training says which variant is better; it does not say how much sooner
the better one got there, which is how optimizer results are usually quoted (modded-nanogpt counts steps
to a target loss). Here the question is answered from the held-out evaluations a suite fixed before its
runs (``heldout.at_steps``, summary.json ``heldout_curve``) plus each run's final held-out loss:

* each seed at the LRs the claims use (chosen on the *other* seeds, :mod:`andrea_lab.experiments.compare.
  selection`), so the step count is not flattered by a choice made on the same seed;
* A's curve is linear between evaluated steps; the first step at which it is at or below B's final loss,
  over B's number of steps, is the seed's fraction (1.0 = as many steps as B needed; below 1: fewer). A
  curve already below the target at its first evaluation counts that step (an upper bound: the curve is
  not known before it);
* the fractions' mean with a t interval over seeds, and how many seeds never reached the target (then no
  interval is given: the never-reached seeds have no fraction, and leaving them out would flatter A).

A schedule that decays only at the end (cosine, WSD) reaches its lowest losses last, so an intermediate
point of such a run is not what that run would score had it been planned to end there: read a fraction
as "A's curve as trained passes B's final loss at", not as the length A would need if planned shorter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import stats
from andrea_lab.experiments.compare.heldout_columns import (
    CURVE_PREFIXES,
    HELDOUT_AT,
    HELDOUT_BY_DOCUMENT,
    HELDOUT_DOCUMENT_AT,
    TEST_LOSS,
)

Curve = list[tuple[int, float]]


def has_curves(runs: pd.DataFrame) -> bool:
    """Whether any run scored the held-out windows at fixed steps."""
    return any(c.startswith((HELDOUT_AT, HELDOUT_DOCUMENT_AT)) and runs[c].notna().any() for c in runs.columns)


def curve_of(row: Mapping, loss_column: str) -> Curve:
    """A run's held-out curve: the evaluations at fixed steps, then its final loss at its last step (the curve
    of the score ``loss_column`` is: token- or document-weighted). The test part of the held-out documents has no
    curve of its own: its runs' curve is the document-weighted one over all held-out documents, ending there."""
    prefix = CURVE_PREFIXES.get(loss_column, HELDOUT_AT)
    loss_column = HELDOUT_BY_DOCUMENT if loss_column == TEST_LOSS else loss_column
    points = [
        (int(key[len(prefix) :]), float(value))
        for key, value in row.items()
        if isinstance(key, str) and key.startswith(prefix) and value is not None and not pd.isna(value)
    ]
    final, steps = row.get(loss_column), row.get("steps")
    if final is not None and not pd.isna(final) and steps is not None and not pd.isna(steps):
        points = [p for p in points if p[0] < int(steps)] + [(int(steps), float(final))]
    return sorted(p for p in points if math.isfinite(p[1]))


def steps_to_reach(curve: Curve, target: float) -> Optional[float]:
    """The first step at which ``curve`` (linear between points) is at or below ``target``; None: never."""
    previous: Optional[tuple[int, float]] = None
    for step, loss in curve:
        if loss <= target:
            if previous is None or previous[1] == loss:
                return float(step)
            (step0, loss0) = previous
            return step0 + (step - step0) * (loss0 - target) / (loss0 - loss)
        previous = (step, loss)
    return None


@dataclass(frozen=True)
class StepsEffect:
    """Per seed, A's steps to B's final loss over B's steps (None: never reached)."""

    a: str
    b: str
    fractions: Mapping[int, Optional[float]]

    @property
    def reached(self) -> dict[int, float]:
        return {seed: f for seed, f in self.fractions.items() if f is not None}

    def describe(self) -> str:
        n = len(self.fractions)
        if n == 0:
            return "no seed with a curve on both sides"
        never = n - len(self.reached)
        if never:
            shown = ", ".join(f"{f:.1%}" for f in self.reached.values()) or "none"
            return f"{never} of {n} seeds never reach it (reached: {shown}); no interval"
        difference = stats.paired_difference(self.reached, {seed: 0.0 for seed in self.reached})
        low = "−∞" if math.isinf(difference.low) else f"{difference.low:.1%}"
        high = "+∞" if math.isinf(difference.high) else f"{difference.high:.1%}"
        return f"{difference.mean:.1%} of {self.b}'s steps [{low}, {high}], n={n}"


def _at_picks(rows: pd.DataFrame, picks: Mapping[int, float]) -> dict[int, Mapping]:
    """Each seed's run at its picked LR."""
    found = {}
    for seed, lr in picks.items():
        match = rows[(rows["seed"] == seed) & (rows["lr"] == lr)]
        if len(match) == 1:
            found[int(seed)] = match.iloc[0].to_dict()
    return found


def steps_effect(
    a: str, b: str, rows_a: pd.DataFrame, rows_b: pd.DataFrame, picks: tuple[Mapping, Mapping], loss_column: str
) -> StepsEffect:
    """A reaching B's final held-out loss, each seed at its picked LRs (``picks``: A's, B's)."""
    runs_a, runs_b = _at_picks(rows_a, picks[0]), _at_picks(rows_b, picks[1])
    fractions: dict[int, Optional[float]] = {}
    for seed in sorted(runs_a.keys() & runs_b.keys()):
        curve_a, curve_b = curve_of(runs_a[seed], loss_column), curve_of(runs_b[seed], loss_column)
        if len(curve_a) < 2 or not curve_b:
            continue  # no curve: this run fixed no steps, or diverged before any
        reached = steps_to_reach(curve_a, curve_b[-1][1])
        fractions[seed] = None if reached is None else reached / curve_b[-1][0]
    return StepsEffect(a, b, fractions)


def steps_rows(variants: Sequence, loss_column: str) -> list[dict[str, str]]:
    """For every variant against the reference, both ways: the rows of the report's "Effects in steps"."""
    reference = next((v for v in variants if v.is_reference), None)
    rows = []
    for variant in variants:
        if reference is None or variant.is_reference or variant.comparison is None:
            continue
        picks_a, picks_b = variant.comparison.cross_fitted_lrs
        forward = steps_effect(
            variant.name, reference.name, variant.rows, reference.rows, (picks_a, picks_b), loss_column
        )
        backward = steps_effect(
            reference.name, variant.name, reference.rows, variant.rows, (picks_b, picks_a), loss_column
        )
        rows.append(
            {
                "variant": variant.name,
                "variant_reaches_reference": forward.describe(),
                "reference_reaches_variant": backward.describe(),
            }
        )
    return rows


STEPS_LEGEND = """\
Each seed at the LRs chosen on the other seeds; the held-out loss at the steps the suite fixed in advance
(`heldout.at_steps`) and at the end, linear in between. "x % of B's steps": where the first variant's curve
first reaches the second's final held-out loss, over the second's steps (below 100 %: sooner), mean over
seeds with its t interval. Under a schedule that decays at the end, an early point is not the loss that run
would reach if planned to end there (andrea_lab.experiments.compare.steps).
"""


def steps_lines(variants: Sequence, loss_column: str, reference: str) -> list[str]:
    """The report section, or [] when no run has a held-out curve."""
    rows = steps_rows(variants, loss_column)
    if not rows:
        return []
    lines = [
        "## Effects in steps",
        "",
        f"| variant | reaches {reference}'s final held-out loss in | {reference} reaches the variant's final in |",
        "|---|---|---|",
    ]
    lines += [f"| {r['variant']} | {r['variant_reaches_reference']} | {r['reference_reaches_variant']} |" for r in rows]
    return [*lines, "", STEPS_LEGEND]
