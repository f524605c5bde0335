"""One error rule for the project: every claim of every committed suite, judged as the project's claims.

Per-suite families let the number of verdicts depend on how claims happen to be grouped into files (Holm
over each suite kept 21 verdicts where one family over the same claims kept 9). The project's rule:

* a claim is **confirmatory** when its LRs are fixed in advance (``lr:``; nothing is selected on the
  runs it is judged on) and it is not marked ``exploratory: true``; all the project's confirmatory claims
  are one family, Holm-adjusted (family-wise error 5 % over the project, under any dependence), and a
  suite added to the project enlarges the family and is recomputed with it;
* A/A suites (two identical variants) check the statistics and are left out; a scaled suite's claims are
  judged at each of its scales and, for a trend, across them, each such judgement one member of the families;
* every other claim (its LR chosen on the runs, or marked exploratory) is **exploratory**: it carries a
  Benjamini-Hochberg q-value over the project's exploratory claims (``scipy.stats.false_discovery_control``)
  and is a lead for a confirmatory rerun, not a verdict;
* beside the paired-t p, the exact sign-flip p and its floor (:func:`~andrea_lab.experiments.compare.stats.
  sign_flip_p`): with 5 seeds it cannot go below 0.0625, so a verdict there rests on the t distribution.

Two checks run on the committed tables themselves (:func:`provenance_problems`): every (scale, variant, LR) cell
holds at least :data:`MIN_SEEDS_PER_CELL` seeds, and every confirmatory claim names the suites its LRs were
chosen in (``lr_from:``) and shares no seed with them, so no LR was chosen on the seeds that judge it. Whether a
suite file was written before its runs is not checked here: the suite files' git history shows it
(docs/experiments.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

import pandas as pd
from scipy import stats as scipy_stats

from andrea_lab.experiments.compare import claims as claims_module
from andrea_lab.experiments.compare import optimum_edges, report, scales, too_few
from andrea_lab.experiments.compare.compare import Column, scored_loss_column
from andrea_lab.experiments.compare.measured import Setup, describe_ours
from andrea_lab.experiments.compare.multiplicity import holm
from andrea_lab.experiments.compare.published import agreement

CONFIRMATORY, EXPLORATORY = "confirmatory", "exploratory"
#: The fewest seeds a committed suite runs in each (scale, variant, LR) cell: below 5 the exact sign-flip test
#: cannot reach p < 0.05 (its floor is 2/2^n) and an interval rests on the t distribution alone.
MIN_SEEDS_PER_CELL = 5
#: A ladder's top rung may run fewer (issue 54: at least 3 there, 5 below): its cost is most of the ladder's.
MIN_SEEDS_TOP_RUNG = 3
#: The name of the project's block in docs/results.md (``<!-- andrea compare: BEGIN project-wide claims -->``).
PROJECT = "project-wide"


def is_confirmatory(claim: claims_module.Claim) -> bool:
    """LRs fixed in advance and not marked exploratory (a sensitivity claim has no LR to fix: exploratory)."""
    return not claim.exploratory and claim.lrs is not None


@dataclass(frozen=True)
class CommittedSuite:
    """One committed suite as the project table reads it: its name, its runs.csv and its suite file's claims.
    ``aa``: it has two identical variants (an A/A check); ``scaled``: it has a scale axis."""

    name: str
    runs: pd.DataFrame
    claims: tuple
    aa: bool = False
    scaled: bool = False
    #: Each variant's non-embedding parameters and tokens (counted from the suite file by commands/compare),
    #: printed beside a published result as what this proxy measured; empty: not counted.
    setups: Mapping[str, Setup] = field(default_factory=dict)
    #: A ladder's top rung (its last scale), held to :data:`MIN_SEEDS_TOP_RUNG`; None: not a ladder.
    top_rung: Optional[str] = None
    #: ``{scale: corpus}`` when its scales are corpora (compare.domains.domain_axis); None: not on a domain axis.
    domains: Optional[Mapping[str, str]] = None


def judged_claims(suites: Iterable[CommittedSuite]) -> pd.DataFrame:
    """Every claim of every suite, one row each, with its suite-level result. A/A suites check the statistics
    and are not hypotheses. A scaled suite's claims are judged at each scale (its ``suite`` is ``name @ scale``)
    and, for a trend across scales, once across them (``name, across scales``)."""
    rows = []
    for suite in suites:
        if not suite.claims or suite.aa:
            continue
        for label, loss_column, results in _judged(suite):
            scored = report.scored_name(loss_column)
            rows.extend(
                {"suite": label, "result": result, "ours": describe_ours(result.claim, suite.setups, scored)}
                for result in results
            )
    return pd.DataFrame(rows, columns=["suite", "result", "ours"])


#: How a scaled suite's rows are labelled: ``stability_width @ d64``, ``stability_width, across scales``.
AT_SCALE, ACROSS_SCALES = " @ ", ", across scales"


def _judged(suite: CommittedSuite) -> Iterable[tuple[str, str, list]]:
    """``(label, scored loss column, results)`` per family the suite's claims are judged in: the suite, or each
    of its scales and its trends across them."""
    if not suite.scaled:
        loss_column = scored_loss_column(suite.runs)
        yield suite.name, loss_column, claims_module.evaluate_claims(list(suite.claims), suite.runs, loss_column)
        return
    for scale, subset in scales.scale_subsets(suite.runs):
        ready = [raw for raw, missing in scales.judgeable(suite.claims, subset) if missing is None]
        if ready:
            loss_column = scored_loss_column(subset)
            results = claims_module.evaluate_claims(ready, subset, loss_column)
            yield f"{suite.name}{AT_SCALE}{scale}", loss_column, results
    scaled = suite.runs[suite.runs[scales.SCALE].notna()]
    loss_column = scored_loss_column(scaled)
    if across := scales.across_results(scaled, suite.claims, loss_column):
        yield f"{suite.name}{ACROSS_SCALES}", loss_column, across


def suite_of(label: str) -> str:
    """The suite of a row's label (:func:`_judged`): its scales and its trends are one suite."""
    return label.split(AT_SCALE)[0].removesuffix(ACROSS_SCALES)


def cited_variants(claims: Iterable) -> set[str]:
    """The variants of the claims that cite a published result: those whose size is printed beside it."""
    parsed = claims_module.parse_claims(list(claims)) if claims else []
    return {name for claim in parsed if claim.published is not None for name in (claim.a, claim.b)}


def _seeds(runs: pd.DataFrame) -> set[int]:
    return {int(seed) for seed in runs["seed"].dropna()}


def fewest_seeds(runs: pd.DataFrame) -> int:
    """The fewest distinct seeds in any (scale, variant, LR) cell of a suite's runs."""
    cell = [column for column in ("scale", "variant", "lr") if column in runs.columns]
    return int(runs.groupby(cell, dropna=False)["seed"].nunique().min()) if len(runs) else 0


def provenance_problems(suites: Iterable[CommittedSuite]) -> list[str]:
    """What keeps the committed suites from the project's standard, one sentence each (empty: none): a cell
    with fewer than :data:`MIN_SEEDS_PER_CELL` seeds; a confirmatory claim that does not say where its LRs were
    chosen (``lr_from:``), names a suite that is not committed, or shares seeds with a suite it names."""
    suites = list(suites)
    by_name = {suite.name: suite for suite in suites}
    problems = []
    for suite in suites:
        at_top = suite.runs["scale"] == suite.top_rung if suite.top_rung and "scale" in suite.runs else None
        parts = (
            [(suite.runs, MIN_SEEDS_PER_CELL)]
            if at_top is None
            else [(suite.runs[~at_top], MIN_SEEDS_PER_CELL), (suite.runs[at_top], MIN_SEEDS_TOP_RUNG)]
        )
        for runs, wanted in parts:
            fewest = fewest_seeds(runs)
            if len(runs) and fewest < wanted:
                problems.append(f"{suite.name}: a cell holds {fewest} seeds (at least {wanted} wanted)")
        for claim in claims_module.parse_claims(list(suite.claims)) if suite.claims else []:
            if suite.aa or not is_confirmatory(claim):
                continue
            if not claim.lr_from:
                problems.append(f"{suite.name}: {claim.label} does not say where its LRs were chosen (lr_from:)")
            for source in claim.lr_from:
                if source not in by_name:
                    problems.append(f"{suite.name}: {claim.label} names lr_from {source!r}, not a committed suite")
                    continue
                shared = sorted(_seeds(suite.runs) & _seeds(by_name[source].runs))
                if shared:
                    problems.append(
                        f"{suite.name}: {claim.label} is judged on seeds {shared} that also chose its LRs in {source}"
                    )
    return problems


def provenance_sentence(suites: Iterable[CommittedSuite]) -> str:
    problems = provenance_problems(suites)
    if not problems:
        return (
            f"Checked on these tables: every suite runs at least {MIN_SEEDS_PER_CELL} seeds in each (scale, "
            f"variant, LR) cell ({MIN_SEEDS_TOP_RUNG} at a ladder's top rung), and every confirmatory claim's LRs "
            "were chosen in suites (lr_from) that share "
            "none of its seeds."
        )
    return "Below the project's standard: " + "; ".join(problems) + "."


def project_table(suites: Iterable[CommittedSuite]) -> pd.DataFrame:
    """The project's claims: kind, raw and exact p, the project-wide Holm p (confirmatory) or BH q
    (exploratory), and the verdict under the project's rule."""
    judged = judged_claims(suites)
    if judged.empty:
        return pd.DataFrame()
    results = list(judged["result"])
    kinds = [CONFIRMATORY if is_confirmatory(r.claim) else EXPLORATORY for r in results]
    adjusted: list[Optional[float]] = [None] * len(results)
    confirmatory = [i for i, kind in enumerate(kinds) if kind == CONFIRMATORY]
    exploratory = [i for i, kind in enumerate(kinds) if kind == EXPLORATORY]
    for index, p in zip(confirmatory, holm([results[i].p for i in confirmatory])):
        adjusted[index] = p
    if exploratory:
        raw = [1.0 if math.isnan(results[i].p) else results[i].p for i in exploratory]
        for index, q in zip(exploratory, scipy_stats.false_discovery_control(raw, method="bh")):
            adjusted[index] = float(q)
    rows = []
    for suite, result, ours, kind, p_project in zip(judged["suite"], results, judged["ours"], kinds, adjusted):
        # an optimum at the grid's edge, or fewer than 3 seeds: no verdict, no lead, whatever the project's p
        unjudged = optimum_edges.is_not_judged(result.outcome) or too_few.is_too_few(result.outcome)
        outcome = result.outcome if unjudged else claims_module.outcome_of(result.favours_a, p_project)
        rows.append(
            {
                "suite": suite,
                "claim": result.claim.label,
                "kind": kind,
                "outcome": outcome,
                "verdict": _verdict(outcome, kind, result.caveat),
                "evidence": result.evidence,
                "p": claims_module.format_p(result.p),
                "exact_p": claims_module.format_exact(result),
                "project_p": claims_module.format_p(p_project),
                "suite_verdict": result.outcome,
                "hypothesis": result.claim.text or result.claim.label,
                "measured": result.measured,
                "published": result.claim.published.describe() if result.claim.published else "",
                "ours": ours if result.claim.published else "",
                "agrees": agreement(result.claim.published, result.measured, outcome),
            }
        )
    return pd.DataFrame(rows)


def _decides(outcome: str) -> bool:
    """Whether an outcome is a verdict (or, exploratory, a lead): not "not detected", not "not judged", not
    from too few seeds."""
    return outcome != "not detected" and not optimum_edges.is_not_judged(outcome) and not too_few.is_too_few(outcome)


def _verdict(outcome: str, kind: str, caveat: str) -> str:
    """The verdict row's words: an exploratory decision is a lead; a claim at fixed LRs off a variant's own
    optimum says so in the row itself, not only in its evidence."""
    words = f"{outcome} (lead)" if kind == EXPLORATORY and _decides(outcome) else outcome
    return f"{words} ({caveat})" if caveat else words


#: The table docs/results.md opens with: the verdicts the project stands behind, and the published results.
VERDICT_COLUMNS = (
    ("suite", "suite"),
    ("hypothesis", "hypothesis"),
    ("claim", "claim"),
    ("verdict", "verdict"),
    ("measured", "counted"),
    ("evidence", "effect (95 % CI, unadjusted), seeds"),
    ("project_p", "project Holm p"),
    ("published", "published result (what the paper measured)"),
    ("ours", "this proxy measured"),
    ("agrees", "this proxy"),
)
LEAD_COLUMNS = (
    ("suite", "suite"),
    ("hypothesis", "hypothesis"),
    ("claim", "claim"),
    ("verdict", "lead"),
    ("measured", "counted"),
    ("evidence", "effect (95 % CI, unadjusted), seeds"),
    ("project_p", "BH q"),
    ("published", "published result (what the paper measured)"),
    ("ours", "this proxy measured"),
    ("agrees", "this proxy"),
)
PROJECT_COLUMNS = (
    ("suite", "suite"),
    ("claim", "claim"),
    ("kind", "kind"),
    ("verdict", "verdict (project rule)"),
    ("suite_verdict", "suite's own verdict"),
    ("p", "p (paired t)"),
    ("exact_p", "exact sign-flip p"),
    ("project_p", "project p: Holm (confirmatory) / BH q (exploratory)"),
    ("evidence", "evidence (95 % CI, unadjusted)"),
)


def project_block(suites: Iterable[CommittedSuite]) -> str:
    """The Markdown block docs/results.md opens with: the counts, then every claim under the project rule."""
    suites = list(suites)
    table = project_table(suites)
    if table.empty:
        return "No suite with claims has committed runs yet."
    confirmatory = table[table["kind"] == CONFIRMATORY]
    decided = confirmatory[confirmatory["outcome"].map(_decides)]
    leads = table[(table["kind"] == EXPLORATORY) & table["outcome"].map(_decides)]
    unjudged = table[table["outcome"].map(optimum_edges.is_not_judged)]
    few = int(table["outcome"].map(too_few.is_too_few).sum())
    suites_judged = len(set(map(suite_of, table["suite"])))
    header = (
        f"{len(table)} claims in {suites_judged} suites: {len(confirmatory)} confirmatory (LRs fixed "
        f"in advance), Holm-adjusted as one project-wide family: {len(decided)} verdicts; "
        f"{len(table) - len(confirmatory)} exploratory, with BH q-values: {len(leads)} leads at q < 0.05 (a lead "
        f"is a reason for a confirmatory rerun, not a verdict); {len(unjudged)} not judged (a variant's optimum at "
        "the edge of its LR grid, or a value its search tuned at the edge of those it tried: never found)"
        + (f"; {few} from fewer than 3 paired seeds (neither verdict nor lead)" if few else "")
        + ". A/A suites are left out (they check the statistics); a scaled suite's claims are judged at each scale "
        "(suite @ scale) and across scales, each one claim of the project's families. " + provenance_sentence(suites)
    )
    return "\n\n".join(
        [
            header,
            "**Verdicts the project stands behind** (confirmatory claims that survive the project-wide Holm "
            "adjustment):",
            _markdown(decided, VERDICT_COLUMNS),
            "**Exploratory leads** (BH q < 0.05; each LR chosen on the runs it is judged on, or marked "
            "exploratory: reasons for a confirmatory rerun, not verdicts):",
            _markdown(leads, LEAD_COLUMNS),
            cited_sentence(decided, leads),
            "**Every claim**, confirmatory and exploratory, decided or not:",
            _markdown(table, PROJECT_COLUMNS),
        ]
    )


def cited_sentence(decided: pd.DataFrame, leads: pd.DataFrame) -> str:
    """How the verdicts and leads that cite a paper compare with it (the ``agrees`` column: agrees, disagrees,
    or a different quantity), counted here so that the prose around the block need not retype counts."""

    def counted(rows: pd.DataFrame, what: str) -> str:
        kinds = [str(value).split(" (")[0] for value in rows.get("agrees", pd.Series(dtype=str)) if value]
        said = {"agrees": "agree", "disagrees": "disagree", "different quantity": "compare different quantities"}
        tally = ", ".join(f"{kinds.count(kind)} {words}" for kind, words in said.items())
        return f"of the {len(kinds)} {what} that cite a paper, {tally}"

    return f"Against the papers: {counted(decided, 'verdicts')}; {counted(leads, 'leads')}."


def _markdown(rows: pd.DataFrame, columns: tuple) -> str:
    """``rows`` as the reports' Markdown table (:func:`report.markdown_table`), "(none)" when there are none."""
    if rows.empty:
        return "(none)"
    return report.markdown_table([Column(key, label, lambda value: value) for key, label in columns], rows)
