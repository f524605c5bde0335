"""The comparison report of a suite: Markdown and CSV from the frames of :mod:`andrea_lab.experiments.compare.compare`,
the plots, and the generated blocks of docs that quote a suite's claims.

Generated blocks sit in a Markdown file between ``<!-- andrea compare: BEGIN <suite> <what> -->`` and
``<!-- andrea compare: END <suite> <what> -->``; :func:`update_generated_block` rewrites what is between
them and nothing else, so numbers in docs are pasted by the program, never typed.
"""

from __future__ import annotations

import re
from operator import itemgetter
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import aa_calibration, compare, csv_cells, search_budgets, too_few
from andrea_lab.experiments.compare.attention_columns import attention_legend
from andrea_lab.experiments.compare.claims import parse_claims
from andrea_lab.experiments.compare.compare import Column
from andrea_lab.experiments.compare.config_variants import SUPERSEDED
from andrea_lab.experiments.compare.costs import cost_notes
from andrea_lab.experiments.compare.divergence import gave_way_lines, stuck_window_note
from andrea_lab.experiments.compare.runs_table import INIT, write_runs_csv
from andrea_lab.experiments.compare.scored import judged_on, legend, scored_name  # noqa: F401 (report.* callers)
from andrea_lab.experiments.compare.stats import COUNTED_STATUSES
from andrea_lab.experiments.compare.steps import has_curves, steps_lines
from andrea_lab.fit.stability import probe
from andrea_lab.runs.directory import format_lr


def markdown_table(columns: Sequence[Column], frame: pd.DataFrame) -> str:
    """A GitHub Markdown table of ``frame`` with each column's label and format."""

    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    rows = [line([c.show(row[c.key]) for c in columns]) for _, row in frame.iterrows()]
    return "\n".join([line([c.label for c in columns]), "|" + "|".join("---" for _ in columns) + "|", *rows])


# ---------------------------------------------------------------------------------------------- at init


def _mean(values: Sequence[float]) -> Optional[float]:
    finite = [float(v) for v in values if v is not None and not pd.isna(v)]
    return sum(finite) / len(finite) if finite else None


def init_profile(rows: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The step-0 picture of a variant: the mean over its runs (the init depends on the seed only) of every
    probe value at init, as ``{metric name: {key: mean}}`` (``{"grad_norm": {"block_00": ...}}``)."""
    profile: dict[str, dict[str, float]] = {}
    for column in rows.columns:
        if column.startswith(INIT) and (mean := _mean(rows[column])) is not None:
            name, _, key = column[len(INIT) :].partition("/")
            profile.setdefault(name, {})[key] = mean
    return profile


def per_block(profile: dict[str, dict[str, float]], metric: probe.ProbeMetric, kind: str = "") -> list[float]:
    """A metric's step-0 means block by block (keys ``block_NN``, or ``block_NN_<kind>`` for a sublayer kind)."""
    values = profile.get(metric.name, {})
    pattern = r"block_\d+" + (f"_{kind}" if kind else "")
    return [values[key] for key in sorted(values) if re.fullmatch(pattern, key)]


def mean_max(values: Sequence[float]) -> str:
    """``mean (max)`` of per-block values, for a table cell."""
    return f"{compare.fmt(_mean(values))} ({compare.fmt(max(values) if values else None)})"


def _first_over_last(blocks: Sequence[float]) -> Optional[float]:
    return blocks[0] / blocks[-1] if blocks and blocks[-1] else None


INIT_COLUMNS = [  # over (variant, its init_profile) pairs: the profile is computed once per variant
    Column("variant", "variant", lambda vp: vp[0].name),
    Column("runs", "runs", lambda vp: len(vp[0].rows)),
    Column(
        "embeddings",
        "grad norm: embeddings",
        lambda vp: compare.fmt(vp[1].get(probe.grad_norm.name, {}).get("embeddings")),
    ),
    Column(
        "first_block",
        "grad norm: first block",
        lambda vp: compare.fmt(next(iter(per_block(vp[1], probe.grad_norm)), None)),
    ),
    Column(
        "last_block",
        "grad norm: last block",
        lambda vp: compare.fmt(next(reversed(per_block(vp[1], probe.grad_norm)), None)),
    ),
    Column(
        "first_over_last",
        "first / last block",
        lambda vp: compare.fmt(_first_over_last(per_block(vp[1], probe.grad_norm)), 2),
    ),
    Column(
        "attn_delta", "attn delta/stream: mean (max)", lambda vp: mean_max(per_block(vp[1], probe.delta_ratio, "attn"))
    ),
    Column(
        "mlp_delta", "MLP delta/stream: mean (max)", lambda vp: mean_max(per_block(vp[1], probe.delta_ratio, "mlp"))
    ),
]

INIT_LEGEND = """\
At step 0, before any update, on the StabilityMonitor's fixed probe batch, mean over the variant's runs:
gradient norms of the embeddings and of the first and last block (their ratio shows how evenly the
gradient reaches the depth), and delta/stream = ‖output − input‖ / ‖input‖ of each attention and MLP
sublayer's wrapper (mean and max over blocks). For pre-norm that is the sublayer's output against the
stream it is added to: well below 1 means the block starts close to the identity. For post-norm the
change includes the LayerNorm after the add, which rescales the stream (by far the most at block 0,
whose input is the small raw embedding).
"""


# ---------------------------------------------------------------------------------------------- outputs


def _left_out_reason(row: Any) -> str:
    if pd.isna(row.lr):
        return "LR unknown"
    if row.status == SUPERSEDED:
        return f"superseded by {row.superseded_by}: the same variant, LR and seed, trained again"
    return str(row.status)


def left_out_notes(runs: pd.DataFrame) -> list[str]:
    """A line for every run that the statistics do not count, with its state."""
    out = runs[~runs["status"].isin(COUNTED_STATUSES) | runs["lr"].isna()]
    if "superseded_by" not in out:
        out = out.assign(superseded_by=None)
    return [f"{row.variant}: left out {Path(row.path).name} ({_left_out_reason(row)})" for row in out.itertuples()]


def verdict_lines(variants: Sequence[compare.Variant]) -> list[str]:
    """One line per variant against the reference, in words first: the answer before the tables."""
    reference = next((v.name for v in variants if v.is_reference), None)
    lines = []
    for variant in variants:
        difference = variant.comparison.cross_fitted if variant.comparison else None
        if variant.is_reference or difference is None:
            continue
        if difference.n == 0:  # a rung still running: one seed each, nothing cross-fitted yet (no NaN printed)
            lines.append(
                f"- **{variant.name}** vs {reference}: no paired seed yet (each seed is judged at the best LRs of "
                f"the other seeds, so both need at least 2 seeds finished)"
            )
            continue
        # fewer than 3 seeds: not bold, not a verdict (a bold word is read as one whatever follows it)
        verdict = too_few.lead_only(difference.n) if difference.too_few_seeds else f"**{difference.verdict}**"
        lines.append(
            f"- **{variant.name}** vs {reference}, each seed at the best LRs of the other seeds: "
            f"{verdict}, difference {difference.describe()} (unadjusted)"
        )
    return lines or ["- only one variant: nothing to compare it with (train another, e.g. with an override)"]


def variants_tables(variants: Sequence[compare.Variant]) -> list[str]:
    """The variant table as two narrower Markdown tables (loss, then stability), so each fits a page."""
    frame = compare.variant_table(variants)
    return [
        markdown_table(compare.variant_columns(compare.VARIANT_LOSS_KEYS, frame), frame),
        "",
        markdown_table(compare.variant_columns(compare.VARIANT_STABILITY_KEYS, frame), frame),
        "",
    ]


def header_lines(suite: str, variants: Sequence[compare.Variant], loss_column: str) -> list[str]:
    """The report's title, reference and score, the verdicts and the variants' tables."""
    reference = next((v.name for v in variants if v.is_reference), "n/a")
    return [
        f"# Comparison: {suite}",
        "",
        f"Reference variant: **{reference}**; scored on the {scored_name(loss_column)}.",
        "",
        *verdict_lines(variants),
        "",
        *variants_tables(variants),
    ]


def init_lines(at_init: Sequence[compare.Variant]) -> list[str]:
    """The section of the variants with a probe at initialisation: their per-block profile."""
    table = compare.table(INIT_COLUMNS, [(v, init_profile(v.rows)) for v in at_init])
    return ["## At initialisation", "", markdown_table(INIT_COLUMNS, table), "", INIT_LEGEND]


#: The tuning budget table's columns (search_budgets.budgets' frame): the scale only where the suite has scales.
BUDGET_COLUMNS = [
    Column(key, label, itemgetter(key))
    for key, label in (
        ("variant", "variant"),
        ("scale", "scale"),
        ("tuned", "tuned by"),
        ("budget", "budget (points)"),
        ("spent", "spent"),
        ("reason", "stopped because"),
        ("best", "best point"),
        ("optimum_not_found", "optimum not found (extend)"),
    )
]


def budget_lines(table: pd.DataFrame) -> list[str]:
    """The section of a suite that searched (its ``search.json``): each variant's tuning budget beside its result,
    the table ``andrea compare`` prints line by line, so that the report read later carries it too."""
    columns = [c for c in BUDGET_COLUMNS if c.key != "scale" or table["scale"].notna().any()]
    return [
        "## Tuning budgets",
        "",
        f"How much tuning each variant got, from the suite's {search_budgets.RECORD}: the points its search was given "
        "(budget) and ran (spent), why it stopped, and the best point it found; a variant tuned over the LR grid "
        "counts one point per LR it ran. A tuned value at the lowest or highest of the values tried is an optimum "
        "not found: no claim is judged on it until its values are extended the way the row says.",
        "",
        markdown_table(columns, table),
        "",
    ]


def suite_sections(
    suite: str,
    variants: Sequence[compare.Variant],
    runs: pd.DataFrame,
    claims: Optional[pd.DataFrame],
    notes: Sequence[str],
    loss_column: str,
    calibration: Optional[str] = None,
    budgets: Optional[pd.DataFrame] = None,
) -> list[tuple[str, str]]:
    """The report as ``(key, Markdown)`` sections, in order: the verdicts and variants, the claims, the tuning
    budgets (a suite that searched), the A/A calibration (a suite with two identical variants), per learning
    rate, at initialisation, notes (those that apply) and the legend. TensorBoard shows each as its own text."""
    sections = [("variants", header_lines(suite, variants, loss_column))]
    if claims is not None and len(claims):
        table = markdown_table(claim_columns(claims), claims)
        sections.append(("claims", ["## Claims", "", judged_on(loss_column), "", table, ""]))
    if budgets is not None and len(budgets):
        sections.append(("budgets", budget_lines(budgets)))
    reference = next((v.name for v in variants if v.is_reference), None)
    if reference is not None and has_curves(runs) and (steps := steps_lines(variants, loss_column, reference)):
        sections.append(("steps", steps))
    if calibration is not None:
        sections.append(("aa_calibration", ["## A/A calibration", "", calibration, ""]))
    sections.append(
        (
            "per_lr",
            [
                "## Per learning rate",
                "",
                "Each row against the reference at the same LR: "
                "no LR is selected, and nothing is adjusted for the many rows.",
                "",
                markdown_table(compare.per_lr_columns(variants), compare.per_lr_table(variants)),
                "",
            ],
        )
    )
    if gave_way := gave_way_lines(runs):
        sections.append(("gave_way_first", gave_way))
    at_init = [v for v in variants if any(c.startswith(INIT) and v.rows[c].notna().any() for c in v.rows.columns)]
    if at_init:
        sections.append(("at_init", init_lines(at_init)))
    if notes:
        sections.append(("notes", ["## Notes", "", *[f"- {note}" for note in notes], ""]))
    sections.append(("legend", [legend(loss_column) + attention_legend(variants)]))
    return [(key, "\n".join(lines)) for key, lines in sections]


def plan_suite(
    suite_runs: pd.DataFrame, reference: Optional[str], claims: Sequence[Any], aa_pair: Optional[tuple[str, str]] = None
) -> dict[str, Any]:
    """Everything a suite's report says, computed before anything is written (a refusal leaves no files).
    ``aa_pair``: two variants of one configuration
    (:meth:`andrea_lab.experiments.sweep.suite.Suite.identical_variants`),
    whose A/A calibration the report adds."""
    loss_column = compare.scored_loss_column(suite_runs)
    variants = compare.build_variants(
        suite_runs, reference if reference in set(suite_runs["variant"]) else None, loss_column
    )
    claim_frame = compare.claims_table(suite_runs, claims, loss_column) if claims and variants else None
    return {
        "runs": suite_runs,
        "loss_column": loss_column,
        "variants": variants,
        "claims": claim_frame,
        "notes": left_out_notes(suite_runs) + cost_notes(suite_runs),
        "calibration": calibration_text(suite_runs, aa_pair),
    }


def calibration_text(runs: pd.DataFrame, aa_pair: Optional[tuple[str, str]]) -> Optional[str]:
    """The A/A calibration block of two identical variants, if both have runs (None otherwise)."""
    if aa_pair is None or not set(aa_pair) <= set(runs["variant"]):
        return None
    loss_column = compare.scored_loss_column(runs)
    calibration = aa_calibration.calibrate(runs, *aa_pair, loss_column)
    by_seeds = aa_calibration.rates_at_seeds(runs, *aa_pair, loss_column)
    return aa_calibration.calibration_block(calibration, int(runs["variant"].isin(aa_pair).sum()), by_seeds)


def _plots(plan: dict[str, Any], directory: Path) -> dict[str, Path]:
    from andrea_lab.experiments.compare import plots  # matplotlib (~1 s): only when figures are written

    variants, notes = plan["variants"], plan["notes"]
    if "val_curve" not in plan["runs"]:  # a runs.csv has no curves to plot
        notes.append(
            "compared from a runs.csv: no curves, so no plots and no initialisation table "
            "(compare the run directories for those)"
        )
        return {}
    files = {
        "loss_curves": plots.plot_loss_curves(variants, directory / "loss_curves.png"),
        "loss_vs_lr": plots.plot_loss_vs_lr(variants, directory / "loss_vs_lr.png"),
    }
    for kind, plot in (
        ("grad_norm_init", plots.plot_init_grad_norms),
        ("delta_ratio_init", plots.plot_init_delta_ratios),
        ("precursors", plots.plot_precursors),
    ):
        path = plot(variants, directory / f"{kind}.png")
        if path is not None:
            files[kind] = path
    if "grad_norm_init" not in files:
        notes.append(
            f"gradient norm by layer at init: skipped, no run has {probe.grad_norm.tag}/block_XX "
            "scalars at step 0 (the StabilityMonitor callback logs them)"
        )
    return files


def write_suite(suite: str, plan: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The planned report of one suite as files in ``directory``: plots, Markdown, CSVs."""
    directory.mkdir(parents=True, exist_ok=True)
    variants, claim_frame = plan["variants"], plan["claims"]
    files = _plots(plan, directory)
    sections = suite_sections(
        suite,
        variants,
        plan["runs"],
        claim_frame,
        plan["notes"],
        plan["loss_column"],
        plan.get("calibration"),
        plan.get("budgets"),
    )
    markdown = "\n".join(text for _, text in sections)
    files["markdown"] = directory / "comparison.md"
    files["markdown"].write_text(markdown, encoding="utf-8")
    files["csv"] = directory / "comparison.csv"
    compare.variant_table(variants).assign(suite=suite).pipe(lambda frame: frame[["suite", *frame.columns[:-1]]]).pipe(
        csv_cells.write_csv, files["csv"]
    )
    files["runs_csv"] = directory / "runs.csv"
    write_runs_csv(plan["runs"], files["runs_csv"])
    if claim_frame is not None:
        files["claims_csv"] = directory / "claims.csv"
        csv_cells.write_csv(claim_frame, files["claims_csv"])
    return {
        "variants": variants,
        "files": files,
        "notes": plan["notes"],
        "markdown": markdown,
        "sections": sections,
        "claims": claim_frame,
        "calibration": plan.get("calibration"),
    }


# ---------------------------------------------------------------------------------------------- docs


def claims_block(runs: pd.DataFrame, claims: Sequence[Any]) -> str:
    """The claims of a suite as the Markdown table that docs/results.md quotes, with what it rests on: the
    runs, the method (selection, family, adjustment) and whether divergence counts are on equal footing."""
    loss_column = compare.scored_loss_column(runs)
    counted = runs[runs["status"].isin(COUNTED_STATUSES)]
    seeds = sorted(int(s) for s in counted["seed"].dropna().unique())
    lrs = sorted(float(lr) for lr in counted["lr"].dropna().unique())
    scored = scored_name(loss_column)
    header = (
        f"{len(counted)} runs: seeds {', '.join(map(str, seeds))}; LRs "
        f"{', '.join(format_lr(lr) for lr in lrs)}; scored on the {scored}."
    )
    parsed = parse_claims(list(claims))
    note = stuck_window_note(counted)
    lines = [header, method_line(parsed), judged_on(loss_column)] + ([note] if note else [])
    frame = compare.claims_table(runs, parsed, loss_column)
    return "\n".join(lines) + "\n\n" + markdown_table(claim_columns(frame), frame)


def method_line(claims: Sequence[Any]) -> str:
    """How the claims of a block were judged: the family, the adjustment, where the LRs come from."""
    family = sum(not claim.exploratory for claim in claims)
    exploratory = len(claims) - family
    fixed = all(claim.lrs is not None for claim in claims if claim.kind not in ("lower_sensitivity", "higher_ceiling"))
    where = (
        "every loss and divergence claim is judged at LRs fixed in advance (nothing is selected)"
        if fixed
        else "a loss is judged at each seed's LRs chosen on the other seeds unless the claim fixes its LR"
    )
    return (
        f"Verdicts at Holm-adjusted p < 0.05 over this suite's {family} claim{'s' * (family != 1)}"
        + (
            f" ({exploratory} exploratory claim{'s' * (exploratory != 1)} judged on the raw p, outside the family)"
            if exploratory
            else ""
        )
        + f"; {where}; intervals are 95 % and unadjusted."
    )


def claim_columns(frame: pd.DataFrame) -> list[Column]:
    """The claim table's columns, without the in-sample one where no claim selects an LR."""
    selects = "in_sample" in frame and frame["in_sample"].astype(bool).any()
    return [c for c in compare.CLAIM_COLUMNS if c.key != "in_sample" or selects]


def doc_blocks(runs: pd.DataFrame, claims: Sequence[Any], aa_pair: Optional[tuple[str, str]] = None) -> dict[str, str]:
    """Every generated block of one suite, by its ``what`` in the markers: ``claims`` (when the suite has
    claims) and ``aa_calibration`` (when it has two identical variants with runs)."""
    blocks = {"claims": claims_block(runs, claims)} if claims else {}
    calibration = calibration_text(runs, aa_pair)
    if calibration is not None:
        blocks["aa_calibration"] = calibration
    return blocks
