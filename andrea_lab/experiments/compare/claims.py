"""Claims from suite files: hypotheses judged on a suite's runs, as one Holm-adjusted family.

A claim is ``{<kind>: [A, B]}`` with optional ``text:``, ``lr:`` and ``exploratory:`` (docs/experiments.md):

- ``lower_loss``: A's capped loss (``min(loss, loss at init)``: a stuck run at the loss it was stopped at, a
  non-finite one at its loss at init) is lower than B's;
- ``lower_loss_trained``: the same over the seeds where *both* runs trained (neither diverged): how good a
  variant is when it trains, apart from how often it gets stuck;
- ``fewer_stuck``, ``fewer_regressions``, ``fewer_blowups``: A has fewer runs with that outcome than B (exact
  McNemar on paired runs): stuck on the unigram plateau, trained then regressed for good, or blew up
  (non-finite or far above where it started; andrea_lab.runs.outcome); a rise that came back is none of them;
- ``fewer_divergences``: fewer runs with any of the three failures (the name the committed suites used; its
  evidence says which failures the counts were);
- ``lower_sensitivity``: A's LR sensitivity is lower than B's;
- ``higher_ceiling``: A's LR ceiling is higher than B's: per seed, log2 of the highest LR of the grid with no
  divergence at it or below (:func:`andrea_lab.experiments.compare.divergence.ceilings`), paired by seed,
  judged by the exact sign-flip test (the differences are whole steps of the grid);
- ``equivalent_loss`` (with ``margin:``, nats): A's and B's capped losses differ by less than the margin, by two
  one-sided t-tests: "not detected" is not "no difference", this claim is how "no difference" is said.

Where a loss is judged: without ``lr:``, each seed at the LRs chosen on the *other* seeds
(:mod:`andrea_lab.experiments.compare.selection`); the in-sample choice is kept as a labelled secondary column. With
``lr: 2.0e-3`` both variants at that LR, fixed in advance (no selection); ``lr: {A: 4.0e-3, B: 1.0e-3}``
each at its own; ``lr: [2.0e-3, 4.0e-3]`` makes one claim per LR (each its own member of the family).
A count (``fewer_*``) with ``lr:`` pairs the runs at those LRs by seed instead of the whole grid by
(lr, seed); ``lower_sensitivity`` and ``higher_ceiling`` are properties of the whole grid and take no ``lr:``.

Every claim has a p-value (paired t for losses and sensitivities, the same t as the interval; exact
McNemar for divergences). The claims of a suite not marked ``exploratory: true`` are one family, Holm-
adjusted (:mod:`andrea_lab.experiments.compare.multiplicity`); the verdict uses the adjusted p, an exploratory
claim's its raw p. **reproduced** / **contradicted**: p < 0.05 with the estimate on the claimed / the
other side; else **not detected**, which is not "no difference".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import optimum_edges, selection, stats, too_few
from andrea_lab.experiments.compare.claim_spec import (
    ACROSS_SCALES,
    CLAIM_KINDS,
    CLAIM_OPTIONS,
    COUNT_KINDS,
    GRID_KINDS,
    MUST_MATCH,
    Claim,
    merge_mirrors,
    parse_claims,
)
from andrea_lab.experiments.compare.divergence import ceilings, failure_breakdown, mostly_stuck, paired_divergences
from andrea_lab.experiments.compare.measured import measured_kind
from andrea_lab.experiments.compare.multiplicity import holm
from andrea_lab.runs.directory import format_lr

__all__ = [
    "ALPHA",
    "CLAIM_KINDS",
    "CLAIM_OPTIONS",
    "CLAIM_OUTCOMES",
    "GRID_KINDS",
    "MUST_MATCH",
    "Claim",
    "ClaimResult",
    "evaluate_claim",
    "evaluate_claims",
    "format_exact",
    "format_p",
    "merge_mirrors",
    "outcome_of",
    "parse_claims",
]

CLAIM_OUTCOMES = ("reproduced", "not detected", "contradicted")
ALPHA = 1 - stats.CONFIDENCE


@dataclass(frozen=True)
class ClaimResult:
    """A claim judged: its outcome, the evidence in words, raw p, Holm p (None: exploratory), the in-sample
    best-LR figure (secondary; empty where nothing is selected) and its p (= ``p`` where nothing is), and the
    exact sign-flip p of the per-seed differences with the smallest p it can reach (NaN for divergence
    counts, whose McNemar p is exact already)."""

    claim: Claim
    outcome: str
    evidence: str
    p: float = math.nan
    p_adjusted: Optional[float] = None
    in_sample: str = ""
    p_in_sample: float = math.nan
    p_exact: float = math.nan
    p_floor: float = math.nan
    #: The estimate's side: True = A lower (the claimed side), False = B lower, None = neither.
    favours_a: Optional[bool] = None
    #: Where the claim's fixed LRs are off a variant's own optimum (:func:`optimum_edges.shared_lr_caveat`).
    caveat: str = ""
    #: Whether ``p_exact`` was sampled (more seeds than can be enumerated) and its Monte Carlo error (NaN: exact).
    p_exact_sampled: bool = False
    p_exact_error: float = math.nan
    #: The kind of quantity the claim counted (``loss``, ``stuck``, ``loss vs plateau``, ...:
    #: :func:`andrea_lab.experiments.compare.measured.measured_kind`), held against a published result's.
    measured: str = ""


# ---------------------------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class _Evidence:
    favours_a: Optional[bool]  # the estimate's side: True = A lower, False = B lower, None = neither
    p: float
    text: str
    in_sample: str = ""
    p_in_sample: Optional[float] = None  # None: nothing selected, the same as p
    differences: Sequence[float] = ()  # the per-seed differences the p rests on (none for divergence counts)
    seeds: int = 0  # how many seeds the figure pairs: below 3 it is a lead, not a verdict (too_few)


def _side(mean: float) -> Optional[bool]:
    return None if math.isnan(mean) or mean == 0 else mean < 0


#: Said where every paired difference is exactly 0 (optimizers_tuned's adamw_indep and adamw at d96: two
#: parametrisations of one update, tuned to the same point): its interval [0, 0] and p = 0 describe no noise.
IDENTICAL = "every pair equal to the bit: both variants ran one computation here, an identity, not a measurement"


def _seeds_note(difference: stats.PairedDifference) -> str:
    return f" ({stats.TOO_FEW_SEEDS})" if 0 < difference.n < stats.MIN_SEEDS else ""


def _loss_note(difference: stats.PairedDifference) -> str:
    """The seeds note, and :data:`IDENTICAL` where every pair's loss is equal: only a loss, a float of a whole
    run, is equal to the bit by one computation (two LR ceilings are equal octaves of a grid by coarseness)."""
    identical = difference.n > 0 and all(value == 0 for value in difference.differences)
    return _seeds_note(difference) + (f" ({IDENTICAL})" if identical else "")


def _fixed_where(claim: Claim) -> str:
    lr_a, lr_b = claim.lrs
    return (
        f"at LR {format_lr(lr_a)}"
        if lr_a == lr_b
        else f"at LRs {claim.a} {format_lr(lr_a)}, {claim.b} {format_lr(lr_b)}"
    ) + " (fixed in advance)"


def _picks(claim: Claim, comparison: stats.Comparison, seeds: Sequence[int]) -> tuple[dict, dict, str]:
    """Per-seed LRs of A and B and where they come from, in words."""
    if claim.lrs is not None:
        lr_a, lr_b = claim.lrs
        return selection.fixed_lrs(lr_a, seeds), selection.fixed_lrs(lr_b, seeds), _fixed_where(claim)
    picks_a, picks_b = comparison.cross_fitted_lrs
    return (
        picks_a,
        picks_b,
        (
            f"at LRs chosen on the other seeds: {selection.describe_picks(claim.a, picks_a)} · "
            f"{selection.describe_picks(claim.b, picks_b)}"
        ),
    )


def _edge_note(claim: Claim, counted: pd.DataFrame, comparison: stats.Comparison) -> str:
    """`` (optimum not bracketed: no_residual at the grid's lowest LR)`` when an in-sample best LR is an edge."""
    edges = []
    for name, best in ((claim.a, comparison.variant_best_lr), (claim.b, comparison.reference_best_lr)):
        grid = sorted(counted.loc[counted["variant"] == name, "lr"].unique())
        if len(grid) > 1 and best in (grid[0], grid[-1]):
            edges.append(f"{name} at the grid's {'lowest' if best == grid[0] else 'highest'} LR")
    return f" (optimum not bracketed: {'; '.join(edges)})" if edges else ""


def _loss_evidence(claim: Claim, counted: pd.DataFrame, comparison: stats.Comparison) -> _Evidence:
    values = "trained" if claim.kind == "lower_loss_trained" else "capped"
    table_a, table_b = stats.loss_table(counted, claim.a, values), stats.loss_table(counted, claim.b, values)
    seeds = sorted(set(table_a.columns) & set(table_b.columns))
    picks_a, picks_b, where = _picks(claim, comparison, seeds)
    difference = selection.difference_at(table_a, table_b, picks_a, picks_b)
    text = (
        f"{claim.a} − {claim.b} = {difference.describe()} {where}"
        if difference.n
        else f"{claim.a} − {claim.b}: no seed to pair (n=0) {where}"
    )
    if values == "trained":
        capped = selection.difference_at(
            stats.loss_table(counted, claim.a), stats.loss_table(counted, claim.b), picks_a, picks_b
        )
        text += f"; {capped.n - difference.n} of {capped.n} pairs left out (a run diverged)"
    in_sample, p_in_sample = "", None
    if claim.lrs is None:
        text += _edge_note(claim, counted, comparison)
        best = {claim.a: comparison.variant_best_lr, claim.b: comparison.reference_best_lr}
        at_best = selection.difference_at(
            table_a, table_b, selection.fixed_lrs(best[claim.a], seeds), selection.fixed_lrs(best[claim.b], seeds)
        )
        in_sample = (
            f"{at_best.describe()} at {format_lr(best[claim.a])} / {format_lr(best[claim.b])}; "
            f"p = {_p(at_best.p_value)}"
        )
        p_in_sample = at_best.p_value
    return _Evidence(
        _side(difference.mean),
        difference.p_value,
        text + _loss_note(difference),
        in_sample,
        p_in_sample,
        difference.differences,
        difference.n,
    )


def _equivalence_evidence(claim: Claim, counted: pd.DataFrame, comparison: stats.Comparison) -> _Evidence:
    """A − B of the capped loss, at the LRs a ``lower_loss`` claim would use, tested for equivalence within the
    declared margin (TOST). Only "reproduced" (equivalent) or "not detected": a difference found is another
    claim's business. No sign-flip p: it tests a mean of 0, not a margin."""
    assert claim.margin is not None
    table_a, table_b = stats.loss_table(counted, claim.a), stats.loss_table(counted, claim.b)
    seeds = sorted(set(table_a.columns) & set(table_b.columns))
    picks_a, picks_b, where = _picks(claim, comparison, seeds)
    difference = selection.difference_at(table_a, table_b, picks_a, picks_b)
    p = stats.tost_p(difference.differences, claim.margin)
    low, high = stats.t_interval(difference.differences, 0.90)
    text = (
        f"{claim.a} − {claim.b} = {_signed3(difference.mean)}, 90 % interval [{_signed3(low)}, {_signed3(high)}], "
        f"n={difference.n}, against the margin ±{claim.margin:g} (TOST) {where}"
    )
    inside = not math.isnan(difference.mean) and abs(difference.mean) < claim.margin
    return _Evidence(True if inside else None, p, text + _loss_note(difference), seeds=difference.n)


def _signed3(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.3f}".replace("-", "−")


def _sensitivity_evidence(claim: Claim, comparison: stats.Comparison) -> _Evidence:
    """Each seed's sensitivity is a function of that seed's runs alone: no LR is chosen across seeds."""
    difference = comparison.sensitivity
    text = f"{claim.a} − {claim.b} = {difference.describe()} in LR sensitivity"
    return _Evidence(
        _side(difference.mean),
        difference.p_value,
        text + _seeds_note(difference),
        differences=difference.differences,
        seeds=difference.n,
    )


def _divergence_evidence(claim: Claim, counted: pd.DataFrame) -> _Evidence:
    """The runs with the outcome the claim counts, paired, by exact McNemar; the text names the outcome and,
    for ``fewer_divergences`` (any failure), what each side's failures were."""
    lrs = None if claim.lrs is None else {claim.a: claim.lrs[0], claim.b: claim.lrs[1]}
    found = paired_divergences(counted, claim.a, claim.b, lrs, COUNT_KINDS[claim.kind])
    text = found.describe(claim.a, claim.b) + ("" if lrs is None else f", {_fixed_where(claim)}")
    if claim.kind == "fewer_divergences":
        text += f"; {failure_breakdown(counted, claim.a, claim.b, lrs)}"
    favours = None if found.only_a == found.only_b else found.only_a < found.only_b
    return _Evidence(favours, found.p_value, text, seeds=_paired_seeds(counted, claim))


def _paired_seeds(counted: pd.DataFrame, claim: Claim) -> int:
    """The seeds both variants ran (at the claim's fixed LRs, where it fixes them): what a count pairs."""
    seeds = []
    for name, lr in zip((claim.a, claim.b), claim.lrs or (None, None)):
        rows = counted[counted["variant"] == name]
        seeds.append(set(rows.loc[rows["lr"] == lr, "seed"] if lr is not None else rows["seed"]))
    return len(seeds[0] & seeds[1])


def _ceiling_evidence(claim: Claim, counted: pd.DataFrame) -> _Evidence:
    """The per-seed LR ceilings in octaves, A − B; the p is the exact sign-flip test's (the differences are
    whole octaves of the grid, not normal), the interval the paired t's."""
    difference = stats.paired_difference(ceilings(counted, claim.a), ceilings(counted, claim.b))
    flips = stats.sign_flip_test(difference.differences)
    test = f"sign-flip p {flips.describe()}" if flips.sampled else "exact sign-flip p"
    text = (
        f"{claim.a} − {claim.b} = {difference.describe(2)} octaves of LR ceiling (log2 of the highest LR with no "
        f"divergence at it or below; one octave under the grid where its lowest LR diverged); {test}"
    )
    favours = None if math.isnan(difference.mean) or difference.mean == 0 else difference.mean > 0
    return _Evidence(
        favours, flips.p, text + _seeds_note(difference), differences=difference.differences, seeds=difference.n
    )


def _evidence(claim: Claim, counted: pd.DataFrame) -> _Evidence:
    if claim.kind in COUNT_KINDS:
        return _divergence_evidence(claim, counted)
    if claim.kind == "higher_ceiling":
        return _ceiling_evidence(claim, counted)
    comparison = stats.compare_pair(counted, claim.a, claim.b)
    if claim.kind == "lower_sensitivity":
        return _sensitivity_evidence(claim, comparison)
    if claim.kind == "equivalent_loss":
        return _equivalence_evidence(claim, counted, comparison)
    return _loss_evidence(claim, counted, comparison)


def _p(p: float) -> str:
    return "n/a" if p is None or math.isnan(p) else f"{p:.3g}"


def outcome_of(favours_a: Optional[bool], p: float) -> str:
    """reproduced / contradicted at p < 0.05 with the estimate on the claimed / other side."""
    if p is None or math.isnan(p) or p >= ALPHA or favours_a is None:
        return "not detected"
    return "reproduced" if favours_a else "contradicted"


def check_alike(claim: Claim, counted: pd.DataFrame) -> None:
    """Refuse a claim whose runs differ in precision or machine kind (:data:`MUST_MATCH`) unless it declares
    so (``across``): the difference would be the machines' as much as the variants'. Runs that did not
    record it (older ones) are not held against it."""
    runs = counted[counted["variant"].isin([claim.a, claim.b])]
    for column in MUST_MATCH:
        if column in claim.across or column not in runs:
            continue
        values = {v: sorted(set(runs.loc[runs["variant"] == v, column].dropna())) for v in (claim.a, claim.b)}
        if len(set(values[claim.a]) | set(values[claim.b])) > 1:
            raise ValueError(
                f"claim {claim.label!r}: its runs differ in {column} ({claim.a}: {', '.join(values[claim.a])}; "
                f"{claim.b}: {', '.join(values[claim.b])}); run them alike, or say it is on purpose with "
                f"`across: [{column}]` in the claim"
            )


def tuning_grid(runs: pd.DataFrame, variant: str) -> tuple[float, ...]:
    """The learning rates of ``variant``'s counted runs (finished or diverged): its tuning budget is how many."""
    return tuple(sorted(set(runs.loc[(runs["variant"] == variant) & runs["lr"].notna(), "lr"].astype(float))))


def check_budgets(claim: Claim, runs: pd.DataFrame) -> None:
    """Refuse a claim that would favour the variant tuned harder: where each variant's LR is chosen (no
    ``lr:``), both must have tried as many LRs per seed unless the claim says ``unequal_budgets: true``; LR
    sensitivity and a divergence count over the grid are properties of the grid, so ``lower_sensitivity`` and
    the counts (``fewer_*``) without ``lr:`` need the same grid."""
    if claim.lrs is not None:  # judged at LRs fixed in advance: nothing was tuned
        return
    grids = {name: tuning_grid(runs, name) for name in (claim.a, claim.b)}
    listed = "; ".join(
        f"{name}: {len(grid)} ({', '.join(format_lr(lr) for lr in grid)})" for name, grid in grids.items()
    )
    if claim.kind in GRID_KINDS and grids[claim.a] != grids[claim.b]:
        raise ValueError(
            f"claim {claim.label!r}: it is measured over the LR grid, and the two variants ran different "
            f"grids ({listed}); give both the same lrs, or fix the LRs it is judged at with lr:"
        )
    if len(grids[claim.a]) != len(grids[claim.b]) and not claim.unequal_budgets:
        raise ValueError(
            f"claim {claim.label!r}: the variants were tuned with different budgets (LRs per seed: {listed}), "
            "so the better-tuned one would be favoured; give both grids as many LRs, or say it is on purpose "
            "with `unequal_budgets: true` in the claim"
        )


def evaluate_claims(
    claims: Sequence[Any], runs: pd.DataFrame, loss_column: str = "final_val_loss"
) -> list[ClaimResult]:
    """Every claim (parsed, or as written in a suite file) judged on ``runs``: the non-exploratory ones as
    one Holm-adjusted family."""
    parsed = list(claims) if all(isinstance(c, Claim) for c in claims) else parse_claims(list(claims))
    for claim in parsed:
        if claim.kind not in CLAIM_KINDS:
            raise ValueError(f"unknown claim kind {claim.kind!r}; valid kinds: {', '.join(CLAIM_KINDS)}")
        if claim.kind in ACROSS_SCALES:
            raise ValueError(f"{claim.label} is judged across a suite's scales, not on one set of runs")
        stats.check_known([claim.a, claim.b], runs)
    counted = stats.counted_runs(runs, loss_column)
    for claim in parsed:
        check_alike(claim, counted)
        check_budgets(claim, counted)
    found = [_evidence(claim, counted) for claim in parsed]
    family = [index for index, claim in enumerate(parsed) if not claim.exploratory]
    adjusted = dict(zip(family, holm([found[index].p for index in family])))
    results = []
    for index, (claim, evidence) in enumerate(zip(parsed, found)):
        p_used = adjusted.get(index, evidence.p)
        # An optimum at the grid's edge was never found: no verdict from it (optimum_edges).
        unjudged = optimum_edges.not_judged_outcome(optimum_edges.claim_edges(claim, counted))
        # Fewer than 3 paired seeds: the estimate's side is a lead, never a verdict (too_few).
        unjudged = unjudged or (too_few.lead_only(evidence.seeds) if too_few.too_few_seeds(evidence.seeds) else "")
        p_in_sample = evidence.p if evidence.p_in_sample is None else evidence.p_in_sample
        flips = stats.sign_flip_test(evidence.differences or [])
        mirrored = (
            f"; also written as {', '.join(claim.mirrors)}: one two-sided test, counted once" if claim.mirrors else ""
        )
        results.append(
            ClaimResult(
                claim,
                unjudged or outcome_of(evidence.favours_a, p_used),
                evidence.text + mirrored,
                evidence.p,
                adjusted.get(index),
                evidence.in_sample,
                p_in_sample,
                flips.p,
                flips.floor,
                evidence.favours_a,
                _caveat(claim, counted),
                flips.sampled,
                flips.error,
                measured_kind(claim, counted),
            )
        )
    return results


def _caveat(claim: Claim, counted: pd.DataFrame) -> str:
    """What the verdict row must say beside the outcome: fixed LRs off a variant's own optimum, and a loss claim
    at fixed LRs where most runs of a side were stuck on the unigram plateau (it then compares the plateau)."""
    notes = [optimum_edges.shared_lr_caveat(claim, counted)]
    if claim.lrs is not None and claim.kind in LOSS_KINDS:
        notes.append(mostly_stuck(counted, {claim.a: claim.lrs[0], claim.b: claim.lrs[1]}))
    return "; ".join(note for note in notes if note)


#: The claims whose figure is the capped loss at chosen or fixed LRs: a stuck run enters it at its plateau
#: (``lower_loss_trained`` leaves such pairs out and says how many).
LOSS_KINDS = ("lower_loss", "equivalent_loss")


def evaluate_claim(claim: Claim, runs: pd.DataFrame, loss_column: str = "final_val_loss") -> ClaimResult:
    """One claim alone (a family of one: its Holm p is its raw p)."""
    return evaluate_claims([claim], runs, loss_column)[0]


def format_exact(result: ClaimResult) -> str:
    """The exact sign-flip p with its floor, saying when the seeds are too few for it to reach 0.05, and when it
    was sampled rather than enumerated (more seeds than :data:`stats.EXACT_FLIPS_MAX_SEEDS`) with its Monte Carlo
    error: a sampled p in a column called exact would be read as exact."""
    if math.isnan(result.p_exact):
        return "n/a (McNemar is exact)" if result.claim.kind in COUNT_KINDS else "n/a"
    if result.p_exact_sampled:
        flips = stats.SignFlipP(result.p_exact, result.p_floor, True, stats.RANDOM_FLIPS, result.p_exact_error)
        return flips.describe()
    floor = f"floor {result.p_floor:.3g}"
    if result.p_floor >= ALPHA:
        floor += ": too few seeds to reach 0.05"
    return f"{_p(result.p_exact)} ({floor})"


def format_p(p: Optional[float]) -> str:
    """A p-value for a table cell (three significant digits; n/a without evidence)."""
    return _p(p)
