"""The report of a suite with a scale axis: each scale's ordinary report in ``<out>/<scale>/``, and in
``<out>/`` the trend — the claims at each scale, the variants at each scale, the figures of
:mod:`andrea_lab.experiments.compare.plots_scales` — as Markdown and CSV (the plan is
:func:`andrea_lab.experiments.compare.scales.plan_scaled_suite`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import compare, csv_cells, report, scales
from andrea_lab.experiments.compare.runs_table import write_runs_csv

LEGEND = """\
How to read this report (docs/experiments.md, "The scale axis"):

- Each scale is an ordinary comparison of its own runs: its report, with the variant, per-LR and
  initialisation tables and its legend, is `<scale>/comparison.md`. Runs are never paired across scales
  (a seed at another width is another initialisation).
- **Claims at each scale**: every claim judged on that scale's runs alone, by the same test as without the
  axis; each cell is the outcome and its evidence (the paired difference with its 95 % interval, or the
  exact test). **n/a**: a variant of the claim has no finished or diverged run at that scale.
- **Claims across scales** (`sensitivity_gap_grows`): A's LR sensitivity minus B's per seed at each
  scale, and the least-squares slope of those gaps over the scales' positions (0, 1, 2, ... in the suite's
  order) with its 95 % interval and t-test; Holm over the claims across scales. The interaction a claim
  at each scale cannot test.
- **LR sensitivity** per scale: the mean over the LR grid of the capped loss minus its best value
  (Wortsman et al. 2023), mean ± sd over seeds; its growth with scale is the trend QK-layernorm should flatten.
- Figures: `loss_vs_lr_by_scale.png` (one panel per variant, one curve per scale), `lr_sensitivity_by_scale.png`,
  and `attn_logit_vs_lr_by_scale.png` (final max attention logit, log y) when the runs recorded it.
"""


def _verdicts(plan: dict[str, Any]) -> list[str]:
    lines = []
    for scale, scale_plan in plan["scales"].items():
        lines += [f"### {scale}", "", *report.verdict_lines(scale_plan["variants"]), ""]
    return lines


def scaled_sections(suite: str, plan: dict[str, Any]) -> list[tuple[str, str]]:
    """The top-level report as ``(key, Markdown)`` sections: verdicts and variants per scale, the claims at each
    scale, the tuning budgets at every scale (a suite that searched), notes, legend (the keys of
    :func:`report.suite_sections`, so TensorBoard shows them alike)."""
    names = list(plan["scales"])
    items = scales.variants_by_scale(plan["scales"])
    variants = [
        "## Variants at each scale",
        "",
        report.markdown_table(scales.SCALE_VARIANT_COLUMNS, compare.table(scales.SCALE_VARIANT_COLUMNS, items)),
        "",
    ]
    sections = [
        (
            "variants",
            [
                f"# Comparison: {suite}, by scale",
                "",
                f"Scales: {', '.join(names)} (each scale's report: `<scale>/comparison.md`); scored on "
                f"the {report.scored_name(plan['loss_column'])}.",
                "",
                *_verdicts(plan),
                *variants,
            ],
        )
    ]
    if plan["claims"] is not None and len(plan["claims"]):
        columns, trend = scales.trend_table(plan["claims"], names)
        claim_lines = ["## Claims at each scale", "", report.markdown_table(columns, trend), ""]
        if plan.get("across") is not None and len(plan["across"]):
            claim_lines += ["## Claims across scales", "", across_table(plan["across"]), ""]
        sections.append(("claims", claim_lines))
    if plan.get("budgets") is not None and len(plan["budgets"]):
        sections.append(("budgets", report.budget_lines(plan["budgets"])))
    notes = plan["notes"]
    if notes:
        sections.append(("notes", ["## Notes", "", *[f"- {note}" for note in notes], ""]))
    sections.append(("legend", [LEGEND]))
    return [(key, "\n".join(lines)) for key, lines in sections]


def write_scaled_suite(suite: str, plan: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Each scale's report in ``directory/<scale>/``, then the trend's figures, Markdown and CSVs in ``directory``:
    ``comparison.md``, ``comparison.csv`` (the variants at each scale), ``claims.csv`` (one row per claim and
    scale) and ``runs.csv`` (every run, with its scale)."""
    # matplotlib (~1 s): only when figures are written
    from andrea_lab.experiments.compare.plots_scales import plot_scale_figures

    directory.mkdir(parents=True, exist_ok=True)
    per_scale = {
        scale: report.write_suite(f"{suite} at {scale}", scale_plan, directory / scale)
        for scale, scale_plan in plan["scales"].items()
    }
    files = plot_scale_figures({scale: p["variants"] for scale, p in plan["scales"].items()}, directory)
    sections = scaled_sections(suite, plan)
    markdown = "\n".join(text for _, text in sections)
    files["markdown"] = directory / "comparison.md"
    files["markdown"].write_text(markdown, encoding="utf-8")
    files["csv"] = directory / "comparison.csv"
    compare.table(scales.SCALE_VARIANT_COLUMNS, scales.variants_by_scale(plan["scales"])).assign(suite=suite).pipe(
        lambda frame: frame[["suite", *frame.columns[:-1]]]
    ).pipe(csv_cells.write_csv, files["csv"])
    files["runs_csv"] = directory / "runs.csv"
    write_runs_csv(plan["runs"], files["runs_csv"])
    if plan["claims"] is not None:
        files["claims_csv"] = directory / "claims.csv"
        csv_cells.write_csv(plan["claims"], files["claims_csv"])
    if plan.get("across") is not None and len(plan["across"]):
        files["claims_across_csv"] = directory / "claims_across_scales.csv"
        csv_cells.write_csv(plan["across"], files["claims_across_csv"])
    return {
        "variants": [],
        "files": files,
        "notes": plan["notes"],
        "markdown": markdown,
        "sections": sections,
        "claims": plan["claims"],
        "scales": per_scale,
    }


def summary_text(suite: str, result: dict[str, Any]) -> str:
    """What ``andrea compare`` prints for a suite with a scale axis: the trend's sections and the files."""
    shown = [text for key, text in result["sections"] if key in ("variants", "claims", "notes")]
    files = [f"  {kind:<26} {path}" for kind, path in result["files"].items()]
    files += [
        f"  {scale + ' report':<26} {scale_result['files']['markdown']}"
        for scale, scale_result in result["scales"].items()
    ]
    return "\n".join([f"## {suite}", "", *shown, *files, ""])


def claims_block_by_scale(runs: pd.DataFrame, claims: Sequence[Any]) -> str:
    """The generated claims block of docs/results.md for a suite with a scale axis: the block
    :func:`report.claims_block` gives at each scale (claims whose variants ran there), under the scale's name."""
    parts = []
    for scale, subset in scales.scale_subsets(runs):
        at_scale = [raw for raw, missing in scales.judgeable(claims, subset) if missing is None]
        if at_scale:
            parts.append(f"**At {scale}**: " + report.claims_block(subset, at_scale))
    across = scales.judge_across_scales(runs[runs[scales.SCALE].notna()], claims, compare.scored_loss_column(runs))
    if len(across):
        parts.append("**Across scales** (one Holm family of its own):\n\n" + across_table(across))
    return "\n\n".join(parts)


def across_table(across: pd.DataFrame) -> str:
    return report.markdown_table(scales.ACROSS_COLUMNS, across)


def doc_blocks_by_scale(
    runs: pd.DataFrame, claims: Sequence[Any], aa_pair: Optional[tuple[str, str]] = None
) -> dict[str, str]:
    """:func:`report.doc_blocks` for a suite with a scale axis: the claims block by scale. An A/A calibration
    pools identical variants' seeds at one configuration, so a scaled suite has none."""
    return {"claims": claims_block_by_scale(runs, claims)} if claims else {}
