"""No verdict from an unfound optimum: a claim that rests on a variant's best LR is not judged where that best
LR sits at the edge of the LRs the variant tried.

Why: a best LR at the grid's lowest or highest value says only that the optimum is there *or beyond*. Muon in
the optimizers suite still gained 0.100 nat per LR doubling at the top of its grid, so its lead over AdamW
measured where its grid happened to stop, not where Muon is best (issue 55). Such a difference is a statement
about the grid, so compare prints which variant and which way to extend the grid instead of a verdict.

Which best LR: the ones the claim is judged at. Without ``lr:`` each seed is judged at the LR chosen on the
*other* seeds (:func:`andrea_lab.experiments.compare.stats.held_out_best_lrs`, the cross-fit), and the in-sample
best (:func:`~andrea_lab.experiments.compare.stats.best_lr`) is the secondary figure; either at an edge is
enough. Both are chosen from the seeds the two variants share, as :func:`~andrea_lab.experiments.compare.stats.
compare_pair` chooses them. The grid is the variant's own counted LRs in the runs handed in, i.e. in one scale
(or corpus) cell: a scaled suite's claims are judged per cell. A variant run at one LR has tuned nothing and
has no edge.

The claims it applies to (:data:`OPTIMUM_KINDS`) are those measured at, or from, an optimum: the loss claims
and the LR sensitivity (mean over the grid minus its best: an optimum beyond the grid makes it a property of
where the grid stops). Divergence counts and LR ceilings are properties of the grid and have no optimum.
A claim at LRs fixed in advance (``lr:``) selects nothing and is judged; where the fixed LR is not the
variant's own best of the LRs the suite also ran it at, its verdict row says so (:func:`shared_lr_caveat`),
since "A beats B at LR x" is not "A beats B" when x is off B's optimum (mlp_ratio_confirm: +0.058 at one
shared LR, +0.002 [−0.014, +0.018] with each at its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import stats
from andrea_lab.experiments.compare.claim_spec import Claim
from andrea_lab.runs.directory import format_lr

#: Claims judged at, or measured from, each variant's best LR.
OPTIMUM_KINDS = ("lower_loss", "lower_loss_trained", "equivalent_loss", "lower_sensitivity")
#: Claims compared at LRs fixed in advance whose verdict depends on where those LRs sit for each variant.
FIXED_LR_KINDS = ("lower_loss", "lower_loss_trained", "equivalent_loss")
#: How a claim's outcome starts when it is not judged (a verdict row, the claims table, the project table).
NOT_JUDGED = "not judged"


@dataclass(frozen=True)
class EdgeOptimum:
    """``variant``'s chosen best LR ``lr`` is the ``edge`` ("lowest"/"highest") LR it tried; ``chosen``: by
    which choice ("in-sample", or the seeds whose cross-fitted pick it is)."""

    variant: str
    lr: float
    edge: str
    chosen: str

    @property
    def direction(self) -> str:
        """Which way the grid must be extended: ``below`` or ``above``."""
        return "below" if self.edge == "lowest" else "above"

    def describe(self) -> str:
        return (
            f"{self.variant}'s optimum at the grid's {self.edge} LR ({format_lr(self.lr)}); "
            f"extend the grid {self.direction}"
        )


def edge_of(lr: float, grid: Sequence[float]) -> Optional[str]:
    """``"lowest"`` / ``"highest"`` when ``lr`` is that end of ``grid``; None inside it, or for a grid of
    fewer than two LRs (nothing was tuned) or an LR that was not chosen (NaN)."""
    ordered = sorted(set(float(value) for value in grid))
    if len(ordered) < 2 or math.isnan(lr):
        return None
    if lr == ordered[0]:
        return "lowest"
    if lr == ordered[-1]:
        return "highest"
    return None


def optimum_edge(
    variant: str, grid: Sequence[float], in_sample_best: float, held_out_picks: Mapping[int, float]
) -> Optional[EdgeOptimum]:
    """The first edge among ``variant``'s chosen LRs: the in-sample best, then each seed's cross-fitted pick
    (the seeds that landed on one edge named together); None when every choice is inside the grid."""
    edge = edge_of(in_sample_best, grid)
    if edge is not None:
        return EdgeOptimum(variant, float(in_sample_best), edge, "in-sample")
    at_edges: dict[float, list[int]] = {}
    for seed, lr in sorted(held_out_picks.items()):
        if edge_of(lr, grid) is not None:
            at_edges.setdefault(float(lr), []).append(int(seed))
    if not at_edges:
        return None
    lr, seeds = next(iter(at_edges.items()))
    chosen = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(str(seed) for seed in seeds)}, chosen on the others"
    return EdgeOptimum(variant, lr, edge_of(lr, grid) or "", chosen)


def pair_edges(counted: pd.DataFrame, a: str, b: str) -> list[EdgeOptimum]:
    """A's and B's optima at an edge of their own grids (``counted``: :func:`stats.counted_runs`), each chosen
    on the seeds the two share, as the claim's comparison chooses them."""
    tables = {name: stats.choice_table(counted, name) for name in (a, b)}
    seeds = tables[a].columns.intersection(tables[b].columns)
    if seeds.empty:
        return []
    found = []
    for name, table in tables.items():
        shared = table[seeds]
        if shared.dropna(how="all").empty:
            continue
        edge = optimum_edge(name, list(table.index), stats.best_lr(shared), stats.held_out_best_lrs(shared))
        if edge is not None:
            found.append(edge)
    return found


#: A runs-frame column: where a searched variant's tuned value sits at an edge of the values its key tried
#: (:mod:`andrea_lab.experiments.compare.search_budgets` fills it from the suite's search.json).
SEARCH_EDGE = "search_edge"


@dataclass(frozen=True)
class TunedEdge:
    """A searched variant run at one tuned point whose value of some key is an edge of that key's values."""

    variant: str
    what: str

    def describe(self) -> str:
        return f"{self.variant}'s optimum not found: {self.what}"


def tuned_edges(counted: pd.DataFrame, names: Sequence[str]) -> list[TunedEdge]:
    """The tuned values at an edge of the variants ``names`` (none where the runs carry no search's)."""
    if SEARCH_EDGE not in counted:
        return []
    found = []
    for name in names:
        texts = sorted({text for text in counted.loc[counted["variant"] == name, SEARCH_EDGE].dropna() if text})
        found += [TunedEdge(name, "; ".join(texts))] if texts else []
    return found


def claim_edges(claim: Claim, counted: pd.DataFrame) -> list[EdgeOptimum | TunedEdge]:
    """The optima at an edge that ``claim`` would be judged at (none for a claim at LRs fixed in advance, or
    one that does not rest on an optimum): the LR grid's, and a search's tuned values (:func:`tuned_edges`)."""
    if claim.kind not in OPTIMUM_KINDS or claim.lrs is not None:
        return []
    return [*pair_edges(counted, claim.a, claim.b), *tuned_edges(counted, (claim.a, claim.b))]


def not_judged_outcome(edges: Sequence[EdgeOptimum | TunedEdge]) -> str:
    """``not judged: pre's optimum at the grid's lowest LR (1e-3); extend the grid below``; empty: judged."""
    return f"{NOT_JUDGED}: " + "; ".join(edge.describe() for edge in edges) if edges else ""


def is_not_judged(outcome: str) -> bool:
    return outcome.startswith(NOT_JUDGED)


def shared_lr_caveat(claim: Claim, counted: pd.DataFrame) -> str:
    """For a loss claim at LRs fixed in advance: ``at a shared LR, off ratio2-matched's own optimum (8e-3)``
    when a fixed LR is not that variant's in-sample best among the LRs it ran here, and ``best LR here at an
    edge, optimum not bracketed: X 2e-3 (its grid's lowest)`` when that best is an edge of what X ran (fixed
    at it or not: the optimum it stands for may lie beyond, and a grid of two LRs brackets nothing); empty
    otherwise (nothing fixed, the fixed LR is each side's interior best, or a side ran only the fixed LR and has
    no optimum to be off)."""
    if claim.lrs is None or claim.kind not in FIXED_LR_KINDS:
        return ""
    off, unbracketed = [], []
    for name, fixed in zip((claim.a, claim.b), claim.lrs):
        table = stats.choice_table(counted, name)
        if len(table.index) < 2 or table.dropna(how="all").empty:
            continue
        best = stats.best_lr(table)
        if format_lr(best) != format_lr(fixed):
            off.append(f"{name}'s own optimum ({format_lr(best)})")
        edge = edge_of(best, list(table.index))
        if edge is not None:  # "its own optimum" is only where this grid stopped
            unbracketed.append(f"{name} {format_lr(best)} (its grid's {edge})")
    if not off and not unbracketed:
        return ""
    where = "at a shared LR" if claim.lrs[0] == claim.lrs[1] else "at fixed LRs"
    notes = [f"{where}, off {' and '.join(off)}" if off else where]
    if unbracketed:
        notes.append(f"best LR here at an edge, optimum not bracketed: {', '.join(unbracketed)}")
    return "; ".join(notes)
