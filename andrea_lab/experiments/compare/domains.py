"""A suite whose scales are corpora (a domain axis): each claim judged per corpus, and one verdict across them.

A suite's ``scales:`` axis takes any overrides (docs/data.md, "A suite on both corpora"); when every scale
names its own ``data.corpus``, the scales are *domains* — the Python standard library, English verse — and
:func:`andrea_lab.experiments.compare.scales.claims_by_scale` has already judged every claim on each corpus's
runs alone (each corpus one Holm family, as each scale is). What this module adds is the reading a researcher
asks for: does the verdict hold on both? ``holds on both`` is an intersection-union test (Berger 1982): the
claim is reproduced at level 0.05 on every corpus, and the conjunction of level-0.05 tests is itself a
level-0.05 test of "it holds on all of them", so no further adjustment is owed. Anything less is said as
it is: ``holds on python only`` (not detected elsewhere), ``contradicted on english``, ``not judged on
english`` (no runs there, too few seeds, or an optimum at its grid's edge) — never folded into "holds".

Each corpus's cell keeps its outcome and its evidence (the paired difference with its 95 % interval and n,
or the exact test), so the table is read without opening the per-scale reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import compare, csv_cells, report, scales
from andrea_lab.experiments.compare.compare import Column

#: The override that makes a scale a domain.
CORPUS_KEY = "data.corpus"
#: The column of the across-domains verdict.
ACROSS = "across"
DOMAINS_CSV = "domains.csv"

HOLDS, NOT_DETECTED, CONTRADICTED, NOT_JUDGED = "holds", "not detected", "contradicted", "not judged"


def domain_axis(scales: Sequence[Any]) -> Optional[dict[str, str]]:
    """``{scale name: corpus}`` when ``scales`` (objects with ``name`` and ``overrides``, a suite's
    :class:`andrea_lab.experiments.sweep.scales.Scale`) form a domain axis — every scale sets ``data.corpus`` and
    no two set the same one — else None (a width axis, or corpora mixed with another axis: their per-scale
    report says enough)."""
    corpora = {scale.name: scale.overrides.get(CORPUS_KEY) for scale in scales}
    values = list(corpora.values())
    if len(values) < 2 or any(not isinstance(value, str) for value in values) or len(set(values)) != len(values):
        return None
    return {name: str(corpus) for name, corpus in corpora.items()}


def state_of(outcome: Optional[str]) -> str:
    """An outcome of the claims table as one of :data:`HOLDS`, :data:`NOT_DETECTED`, :data:`CONTRADICTED`,
    :data:`NOT_JUDGED`. Qualified outcomes keep their word ("reproduced (at a shared LR, ...)" holds); "n/a",
    "not judged: ...", "too few seeds ..." and a missing row are not judged."""
    text = (outcome or "").replace("**", "").strip()  # the claims table's outcome is bold
    if text.startswith("reproduced"):
        return HOLDS
    if text.startswith("contradicted"):
        return CONTRADICTED
    if text.startswith("not detected"):
        return NOT_DETECTED
    return NOT_JUDGED


def across_domains(outcomes: Mapping[str, Optional[str]]) -> str:
    """The verdict across domains from each domain's outcome (in the suite's order): ``holds on both`` (``on
    all N`` for more than two), ``holds on python only``, ``holds on neither``, ``contradicted on english``,
    ``not judged on english`` — joined with ``; `` where several apply."""
    by_state: dict[str, list[str]] = {HOLDS: [], NOT_DETECTED: [], CONTRADICTED: [], NOT_JUDGED: []}
    for domain, outcome in outcomes.items():
        by_state[state_of(outcome)].append(domain)
    count = len(outcomes)
    if len(by_state[HOLDS]) == count:
        return "holds on both" if count == 2 else f"holds on all {count}"
    parts = []
    if by_state[HOLDS]:
        only = " only" if not by_state[NOT_JUDGED] else ""
        parts.append(f"holds on {_joined(by_state[HOLDS])}{only}")
    elif by_state[NOT_DETECTED] and not by_state[CONTRADICTED] and not by_state[NOT_JUDGED]:
        parts.append("holds on neither" if count == 2 else "holds on none")
    if by_state[NOT_DETECTED] and (by_state[NOT_JUDGED] or (by_state[CONTRADICTED] and not by_state[HOLDS])):
        parts.append(f"not detected on {_joined(by_state[NOT_DETECTED])}")
    if by_state[CONTRADICTED]:
        parts.append(f"contradicted on {_joined(by_state[CONTRADICTED])}")
    if by_state[NOT_JUDGED]:
        parts.append(f"not judged on {_joined(by_state[NOT_JUDGED])}")
    return "; ".join(parts)


def _joined(domains: Sequence[str]) -> str:
    return " and ".join(domains) if len(domains) < 3 else ", ".join(domains[:-1]) + f" and {domains[-1]}"


def domain_table(by_scale: pd.DataFrame, domains: Sequence[str]) -> pd.DataFrame:
    """One row per claim (``claim``, ``text``), one column per domain holding its outcome and evidence, and
    :data:`ACROSS`; ``by_scale`` is :func:`andrea_lab.experiments.compare.scales.claims_by_scale`'s frame
    (one row per claim and scale). A domain without a row for the claim reads ``n/a`` (not judged there)."""
    rows = []
    for (claim, text), group in by_scale.groupby(["claim", "text"], sort=False, dropna=False):
        found = {row.scale: (str(row.outcome), str(row.evidence)) for row in group.itertuples()}
        cells = {domain: f"{found[domain][0]}: {found[domain][1]}" if domain in found else "n/a" for domain in domains}
        across = across_domains({domain: found.get(domain, (None, ""))[0] for domain in domains})
        rows.append({"claim": claim, "text": text, **cells, ACROSS: across})
    return pd.DataFrame(rows, columns=["claim", "text", *domains, ACROSS])


def domain_columns(corpora: Mapping[str, str]) -> list[Column]:
    """The Markdown columns of :func:`domain_table`: each domain labelled with its corpus."""
    return [
        Column("claim", "claim", lambda r: r),
        Column("text", "hypothesis", lambda r: r),
        *[Column(domain, f"on {domain} ({corpus})", lambda r: r) for domain, corpus in corpora.items()],
        Column(ACROSS, "across domains", lambda r: r),
    ]


def domain_markdown(table: pd.DataFrame, corpora: Mapping[str, str]) -> str:
    """The verdict × domain table as the report and docs/results.md show it."""
    return "\n".join(
        [
            "## Verdict × domain",
            "",
            "Each claim judged on each corpus's runs alone (its own Holm family); across domains, 'holds on both' "
            "needs it reproduced on every corpus (an intersection-union test).",
            "",
            report.markdown_table(domain_columns(corpora), table),
        ]
    )


def judged_by_domain(runs: pd.DataFrame, claims: Sequence[Any], corpora: Mapping[str, str]) -> Optional[pd.DataFrame]:
    """:func:`domain_table` of a suite's runs (their scaled rows) and claims, judged on each corpus; None when no
    claim was judged at any scale."""
    scaled = runs[runs[scales.SCALE].notna()]
    by_scale = scales.claims_by_scale(scaled, claims, compare.scored_loss_column(scaled))
    return domain_table(by_scale, list(corpora)) if len(by_scale) else None


def domain_block(suite: Any, runs: pd.DataFrame) -> Optional[str]:
    """The verdict × domain table of a suite whose scales are corpora, judged from its runs (a runs.csv alone
    regenerates it: docs/results.md's ``domains`` block); None for any other suite or one without claims."""
    corpora = domain_axis(suite.scales) if suite is not None else None
    if corpora is None or not suite.claims:
        return None
    table = judged_by_domain(runs, suite.claims, corpora)
    return domain_markdown(table, corpora) if table is not None else None


def print_domain_report(suite: Any, written: Mapping[str, Mapping[str, Any]]) -> Optional[str]:
    """For a suite (a :class:`andrea_lab.experiments.sweep.suite.Suite`, or None) whose scales are a domain axis
    and whose claims were judged per scale (``written[suite.name]``: what
    :func:`andrea_lab.experiments.compare.scales_report.write_scaled_suite` returned): ``domains.csv`` beside
    its ``comparison.md``, and the verdict × domain table printed (``andrea compare``'s output) and returned as
    Markdown. None for any other suite."""
    result = written.get(suite.name) if suite is not None else None
    corpora = domain_axis(suite.scales) if result is not None else None
    by_scale = result.get("claims") if result is not None else None
    if corpora is None or by_scale is None or not len(by_scale) or "scale" not in by_scale:
        return None
    table = domain_table(by_scale, list(corpora))
    directory = Path(result["files"]["markdown"]).parent
    csv_cells.write_csv(table, directory / DOMAINS_CSV)
    markdown = domain_markdown(table, corpora)
    print(f"{markdown}\n\n  {'domains_csv':<26} {directory / DOMAINS_CSV}")
    return markdown


def project_domain_block(committed: Sequence[Any]) -> Optional[str]:
    """Every committed suite whose scales are corpora, in one verdict × domain table (suite, claim, each
    corpus's outcome and evidence, across domains): the table docs/results.md opens its second-domain sections
    with, so that a reader sees in one place which verdicts hold on both. ``committed`` holds
    :class:`andrea_lab.experiments.compare.project.CommittedSuite` entries; None when none is on a domain axis."""
    tables, corpora = [], {}
    for entry in committed:
        if not entry.domains or not entry.claims:
            continue
        table = judged_by_domain(entry.runs, entry.claims, entry.domains)
        if table is not None:
            tables.append(table.assign(suite=entry.name))
            corpora.update({name: corpus for name, corpus in entry.domains.items() if name not in corpora})
    if not tables:
        return None
    table = pd.concat(tables, ignore_index=True).fillna("n/a")
    columns = [Column("suite", "suite", lambda r: f"`{r}`"), *domain_columns(corpora)]
    return "\n".join(
        [
            f"{len(table)} claims of {len(tables)} suites asked on more than one corpus, each judged on each corpus's "
            "runs alone; 'holds on both' needs it reproduced on every corpus (an intersection-union test).",
            "",
            report.markdown_table(columns, table),
        ]
    )
