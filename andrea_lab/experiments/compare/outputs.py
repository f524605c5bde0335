"""Every output of ``andrea compare --out`` for every suite of a runs table: each suite is planned first
(a refusal leaves no directory behind), then written by :mod:`andrea_lab.experiments.compare.report` or, for a suite
with a scale axis, by :mod:`andrea_lab.experiments.compare.scales_report` (a report per scale, and the trend).
A module of its own so that the report does not import the scale reports built on top of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import report, scales, scales_report
from andrea_lab.experiments.compare.out_dir import check_names, claim_out_dir


def write_outputs(
    runs: pd.DataFrame,
    out: Path,
    reference: Optional[str] = None,
    claims: Sequence[Any] = (),
    aa_pair: Optional[tuple[str, str]] = None,
    budgets: Optional[pd.DataFrame] = None,
) -> dict[str, dict]:
    """Markdown, CSVs and PNGs for every suite in ``runs``; returns what was written, per suite. Every suite
        is planned first, so a refusal (a ValueError) leaves no directory behind; ``out`` is compare's own
    (:mod:`andrea_lab.experiments.compare.out_dir`): never a user's directory, never through a link.
    ``budgets``: the tuning budget table of a suite that searched (:func:`search_budgets.budgets`), which its
    comparison.md carries as a section (the top-level one of a suite with scales)."""
    suites = list(dict.fromkeys(runs["suite"]))
    check_names("suite", suites)
    plans = {}
    for suite in suites:
        suite_runs = runs[runs["suite"] == suite]
        plans[suite] = (
            scales.plan_scaled_suite(suite_runs, reference, claims)
            if scales.has_scales(suite_runs)
            else report.plan_suite(suite_runs, reference, claims, aa_pair)
        )
        if budgets is not None:
            plans[suite]["budgets"] = budgets[budgets["variant"].isin(set(suite_runs["variant"]))]
    check_names("scale", [scale for plan in plans.values() for scale in plan.get("scales") or ()])
    claim_out_dir(out)
    return {
        suite: (scales_report.write_scaled_suite if "scales" in plan else report.write_suite)(
            suite, plan, out if len(suites) == 1 else out / suite
        )
        for suite, plan in plans.items()
    }


def doc_blocks(
    runs: pd.DataFrame, claims: Sequence[Any] = (), aa_pair: Optional[tuple[str, str]] = None
) -> dict[str, str]:
    """The generated blocks of a suite's runs for a Markdown file (``andrea compare --doc``): by scale for a suite
    with a scale axis (:func:`scales_report.doc_blocks_by_scale`), else :func:`report.doc_blocks`."""
    return (scales_report.doc_blocks_by_scale if scales.has_scales(runs) else report.doc_blocks)(runs, claims, aa_pair)
