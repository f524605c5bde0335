"""Comparing the variants of a suite: its runs frame (:mod:`andrea_lab.experiments.compare.runs_table`) reduced to
tables, every variant set against one reference variant with paired statistics
(:mod:`andrea_lab.experiments.compare.stats`; claims in :mod:`andrea_lab.experiments.compare.claims`).

A table is a list of :class:`Column` s: each is one aggregation over a variant (or one learning rate of
it) plus its label and format, so adding a column is one line here; the frame, its CSV and its Markdown
all come from that list (:mod:`andrea_lab.experiments.compare.report`).

The loss a comparison scores is the held-out loss (summary.json's ``heldout``, drawn across all held-out
documents; document-weighted where every run recorded that score, see :func:`scored_loss_column`) when any
counted run has one (finished runs without one are set aside and named in the notes),
else the in-training validation loss of older runs; the report says which. A diverged run counts as its
loss at init (capped), a run that blew up (non-finite) too, since its last validation may predate the blow-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from andrea_lab.data.strata import STRATA
from andrea_lab.experiments.compare import claims as claims_module
from andrea_lab.experiments.compare import heldout_columns, stats, too_few
from andrea_lab.experiments.compare.attention_columns import attention_columns
from andrea_lab.experiments.compare.divergence import any_outcome_to_tell, describe_kinds, describe_rate
from andrea_lab.experiments.compare.heldout_columns import BITS_PER_BYTE, SELECTION_LOSS, STRATUM_COLUMNS, TEST_LOSS
from andrea_lab.runs.directory import format_lr

HELDOUT = "heldout_loss"
HELDOUT_BY_DOCUMENT = heldout_columns.HELDOUT_BY_DOCUMENT
IN_TRAINING = "final_val_loss"


def scored_loss_column(runs: pd.DataFrame) -> str:
    """The held-out test part's score (``heldout_test_loss``: the document-weighted score on the documents that
    choose nothing, andrea_lab.data.judging_split; LRs are chosen on the selection part's) when every counted
    run with a held-out loss has both parts'; else the document-weighted held-out score over all held-out
    documents (``heldout_document_loss``, andrea_lab.data.heldout), which chooses and judges alike, when every
    such run has it; else ``heldout_loss`` (token-weighted: runs recorded before the document-weighted score
    was kept, which a comparison never mixes with it) when any counted run has it (those without are set aside
    by :func:`~andrea_lab.experiments.compare.stats.set_aside_unscored`, named in the notes); else
    ``final_val_loss`` (runs from before the held-out evaluation, or fitted with it off)."""
    counted = runs[runs["status"].isin(stats.COUNTED_STATUSES)]
    has_heldout = HELDOUT in counted and len(counted) and counted[HELDOUT].notna().any()
    if not has_heldout:
        return IN_TRAINING
    scored = counted[counted[HELDOUT].notna()]
    if all(column in scored and scored[column].notna().all() for column in (SELECTION_LOSS, TEST_LOSS)):
        return TEST_LOSS  # every run split its held-out documents: choose on the selection part, judge on test
    by_document = HELDOUT_BY_DOCUMENT in scored and scored[HELDOUT_BY_DOCUMENT].notna().all()
    return HELDOUT_BY_DOCUMENT if by_document else HELDOUT


def variant_order(runs: pd.DataFrame) -> list[str]:
    """Variants in their suite's order (``variant_index`` from the sweep), else in the order first seen."""
    first_seen = {name: n for n, name in enumerate(dict.fromkeys(runs["variant"]))}
    index = runs.groupby("variant", sort=False)["variant_index"].min() if "variant_index" in runs else {}

    def position(name: str) -> tuple[float, int]:
        value = index.get(name)
        return (math.inf if value is None or pd.isna(value) else float(value), first_seen[name])

    return sorted(first_seen, key=position)


@dataclass
class Variant:
    """What the columns aggregate: one variant's counted runs and its comparison with the reference."""

    name: str
    rows: pd.DataFrame  # counted runs, with ``capped`` and ``diverged``
    capped: pd.DataFrame  # capped loss: index lr, columns seed
    comparison: Optional[stats.Comparison]  # None for the reference itself
    best_lr: float
    is_reference: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def sensitivity(self) -> pd.Series:
        return stats.lr_sensitivity_per_seed(self.capped)

    @property
    def at_best(self) -> pd.Series:
        return self.capped.loc[self.best_lr]

    def flags(self) -> list[str]:
        """This variant's own warnings: an optimum at the grid's edge, too few seeds for an interval."""
        found = [flag] if (flag := stats.edge_flag(self.best_lr, self.capped.index)) else []
        if self.capped.shape[1] < stats.MIN_SEEDS:
            found.append(stats.TOO_FEW_SEEDS)
        return found

    def diverged_per_lr(self) -> str:
        by_lr = self.rows.groupby("lr")["diverged"].agg(["sum", "size"])
        return " · ".join(f"{format_lr(lr)}: {int(k)}/{int(n)}" for lr, (k, n) in by_lr.iterrows())


@dataclass(frozen=True)
class Column:
    """One column: a CSV name, a Markdown label, the aggregation and how to print its value."""

    key: str
    label: str
    value: Callable[[Any], Any]
    show: Callable[[Any], str] = str


def fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def mean_sd(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "n/a"
    return fmt(float(values.mean())) + ("" if len(values) < 2 else f" ± {fmt(float(values.std(ddof=1)))}")


def _versus(difference: Optional[stats.PairedDifference]) -> str:
    if difference is None:
        return "reference"
    if difference.n == 0:
        return "n/a"
    verdict = too_few.lead_only(difference.n) if difference.too_few_seeds else difference.verdict
    return f"{verdict}: {difference.describe()}"


def _mean_at_best(variant: "Variant", name: str) -> Optional[float]:
    """Mean of the runs.csv column ``name`` at the variant's best LR (bits per byte, a stratum's score);
    None where no run recorded it."""
    column = variant.rows.get(name)
    if column is None:
        return None
    values = pd.to_numeric(column[variant.rows["lr"] == variant.best_lr], errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


def _grad(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.3g}"


VARIANT_COLUMNS = [
    Column("variant", "variant", lambda v: v.name),
    Column("runs", "runs", lambda v: len(v.rows)),
    Column("seeds", "seeds", lambda v: int(v.rows["seed"].nunique())),
    Column("tuning_budget", "LRs tried", lambda v: len(v.capped.index)),
    Column("best_lr", "best LR (all seeds)", lambda v: v.best_lr, format_lr),
    Column("loss_at_best_mean", "capped loss at best LR", lambda v: float(v.at_best.mean()), lambda x: fmt(x)),
    Column("loss_at_best_sd", "sd over seeds", lambda v: float(v.at_best.std(ddof=1)), fmt),
    Column("bits_per_byte", "bits/byte at best LR", lambda v: _mean_at_best(v, BITS_PER_BYTE), fmt),
    *(
        Column(f"{stratum}_at_best", f"{stratum} loss at best LR", lambda v, c=column: _mean_at_best(v, c), fmt)
        for stratum, column in zip(STRATA, STRATUM_COLUMNS)
    ),
    Column(
        "vs_reference",
        "− reference, LRs chosen on the other seeds [95 % CI]",
        lambda v: _versus(v.comparison and v.comparison.cross_fitted),
    ),
    Column(
        "vs_reference_in_sample",
        "− reference at in-sample best LRs (secondary)",
        lambda v: _versus(v.comparison and v.comparison.at_best),
    ),
    Column("lr_sensitivity", "LR sensitivity", lambda v: mean_sd(v.sensitivity)),
    Column(
        "sensitivity_vs_reference",
        "sensitivity − reference [95 % CI]",
        lambda v: _versus(v.comparison and v.comparison.sensitivity),
    ),
    Column("diverged_per_lr", "failed per LR", lambda v: v.diverged_per_lr()),
    Column("grad_norm_median", "grad norm median", lambda v: v.rows["grad_norm_median"].median(), _grad),
    Column(
        "grad_norm_max_after_warmup",
        "grad norm max after warmup",
        lambda v: v.rows["grad_norm_max_after_warmup"].max(),
        _grad,
    ),
    Column("spikes", "spikes", lambda v: int(v.rows["spike_count"].fillna(0).sum())),
    Column(
        "lens_blocks_to_final",
        "blocks to final (lens)",  # median at the best LR, from `andrea lens`
        lambda v: v.rows[v.rows["lr"] == v.best_lr].get("lens_blocks_to_final", pd.Series(dtype=float)).median(),
        lambda x: fmt(x, 1),
    ),
    Column("flags", "flags", lambda v: "; ".join(v.flags())),
]
#: The variant table in Markdown is two narrower tables (one wide one wraps its numbers on a page):
#: the loss and its comparison, then the stability columns. The CSV keeps all columns in one frame.
VARIANT_LOSS_KEYS = (
    "variant",
    "runs",
    "seeds",
    "tuning_budget",
    "best_lr",
    "loss_at_best_mean",
    "loss_at_best_sd",
    "bits_per_byte",
    *(f"{stratum}_at_best" for stratum in STRATA),
    "vs_reference",
    "vs_reference_in_sample",
)
VARIANT_STABILITY_KEYS = (
    "variant",
    "lr_sensitivity",
    "sensitivity_vs_reference",
    "diverged_per_lr",
    "grad_norm_median",
    "grad_norm_max_after_warmup",
    "spikes",
    "flags",
)


@dataclass(frozen=True)
class Cell:
    """One learning rate of one variant (a row of the per-LR table)."""

    variant: Variant
    lr: float

    @property
    def rows(self) -> pd.DataFrame:
        return self.variant.rows[self.variant.rows["lr"] == self.lr]

    @property
    def paired(self) -> Optional[stats.PairedDifference]:
        comparison = self.variant.comparison
        return None if comparison is None else comparison.per_lr.get(self.lr)


PER_LR_COLUMNS = [
    Column("variant", "variant", lambda c: c.variant.name),
    Column("lr", "LR", lambda c: format_lr(c.lr) + (" ←best" if c.lr == c.variant.best_lr else "")),
    Column("seeds", "seeds", lambda c: len(c.rows)),
    Column("capped_loss", "capped loss (min of loss, loss at init)", lambda c: mean_sd(c.rows["capped"])),
    Column(
        "vs_reference",
        "− reference, same LR [95 % CI, unadjusted]",
        lambda c: "reference" if c.variant.is_reference else ("n/a" if c.paired is None else _versus(c.paired)),
    ),
    Column("diverged", "failed [exact 95 %]", lambda c: describe_rate(int(c.rows["diverged"].sum()), len(c.rows))),
    Column("trained_loss", "loss of the runs that trained", lambda c: _trained(c.rows["trained"])),
    Column(
        "divergence_p",
        "Fisher p vs reference (unadjusted)",
        lambda c: "" if c.variant.comparison is None else fmt(c.variant.comparison.divergence_p.get(c.lr, math.nan), 2),
    ),
    Column("spikes", "spikes", lambda c: int(c.rows["spike_count"].fillna(0).sum())),
]


def _trained(values: pd.Series) -> str:
    """Mean ± sd of the runs that did not diverge, and how many there were: ``2.150 ± 0.010 (n=2)``."""
    values = values.dropna()
    return "none" if values.empty else f"{mean_sd(values)} (n={len(values)})"


def build_variants(
    runs: pd.DataFrame, reference: Optional[str] = None, loss_column: Optional[str] = None
) -> list[Variant]:
    """One :class:`Variant` per variant with counted runs, in suite order; the reference first-listed by
    default. Variants with no counted run are left out (the report lists their runs)."""
    loss_column = loss_column or scored_loss_column(runs)
    counted = stats.counted_runs(runs[runs["lr"].notna()], loss_column)
    names = [name for name in variant_order(runs) if name in set(counted["variant"])]
    if not names:
        return []
    reference = reference or names[0]
    if reference not in names:
        raise ValueError(
            f"reference variant {reference!r} has no finished or diverged run; variants with runs: {', '.join(names)}"
        )
    comparisons = stats.compare_variants(runs[runs["lr"].notna()], reference, loss_column)
    variants = []
    for name in names:
        rows = counted[counted["variant"] == name]
        capped = rows.pivot(index="lr", columns="seed", values="capped").sort_index()
        comparison = comparisons.get(name)
        best = comparison.variant_best_lr if comparison else stats.best_lr(capped)
        variants.append(Variant(name, rows, capped, comparison, best, is_reference=name == reference))
    return variants


def table(columns: Sequence[Column], items: Sequence[Any]) -> pd.DataFrame:
    """The frame of ``columns`` over ``items``: one row per item, one column per aggregation."""
    return pd.DataFrame([{c.key: c.value(item) for c in columns} for item in items], columns=[c.key for c in columns])


def variant_table(variants: Sequence[Variant]) -> pd.DataFrame:
    """Every :data:`VARIANT_COLUMNS`, less bits per byte and the strata where no run recorded them (older runs)."""
    frame = table(VARIANT_COLUMNS, variants)
    optional = ["bits_per_byte", *(f"{stratum}_at_best" for stratum in STRATA)]
    return frame.drop(columns=[key for key in optional if not frame[key].notna().any()])


def variant_columns(keys: Sequence[str], frame: Optional[pd.DataFrame] = None) -> list[Column]:
    """The :data:`VARIANT_COLUMNS` named by ``keys``, in that order (those ``frame`` has, when given)."""
    by_key = {column.key: column for column in VARIANT_COLUMNS}
    return [by_key[key] for key in keys if frame is None or key in frame]


def describe_cell(cell) -> str:
    """How the runs of one (variant, LR) cell ended (divergence.describe_kinds)."""
    return describe_kinds(cell.rows)


def per_lr_columns(variants: Sequence[Variant]) -> list[Column]:
    """:data:`PER_LR_COLUMNS`, plus the attention columns some run of ``variants`` has values for
    (:mod:`andrea_lab.experiments.compare.attention_columns`)."""

    kinds = (
        [Column("divergence_kinds", "how they ended (failed = stuck, blew up or regressed)", describe_cell)]
        if any(any_outcome_to_tell(v.rows) for v in variants)
        else []
    )
    return [*PER_LR_COLUMNS, *kinds, *(Column(*spec) for spec in attention_columns(variants))]


def per_lr_table(variants: Sequence[Variant]) -> pd.DataFrame:
    return table(per_lr_columns(variants), [Cell(v, float(lr)) for v in variants for lr in v.capped.index])


CLAIM_COLUMNS = [
    Column("claim", "claim", lambda r: r.claim.label),
    Column("text", "hypothesis", lambda r: r.claim.text),
    Column("outcome", "outcome", lambda r: _outcome_words(r.outcome) + (f" ({r.caveat})" if r.caveat else "")),
    Column("evidence", "evidence (95 % CI, unadjusted, or exact test)", lambda r: r.evidence),
    Column("p", "p", lambda r: claims_module.format_p(r.p)),
    Column("p_exact", "exact sign-flip p", claims_module.format_exact),
    Column(
        "p_holm", "Holm p", lambda r: "exploratory" if r.p_adjusted is None else claims_module.format_p(r.p_adjusted)
    ),
    Column("in_sample", "in-sample best LR (secondary, biased)", lambda r: r.in_sample),
]


def _outcome_words(outcome: str) -> str:
    """The outcome in bold, except one from too few seeds: a bold word is read as a verdict (too_few)."""
    return outcome if too_few.is_too_few(outcome) else f"**{outcome}**"


def claims_table(runs: pd.DataFrame, claims: Sequence[Any], loss_column: Optional[str] = None) -> pd.DataFrame:
    """Each claim of the suite evaluated on the runs, as one Holm family: reproduced / not detected /
    contradicted (:mod:`andrea_lab.experiments.compare.claims`)."""
    loss_column = loss_column or scored_loss_column(runs)
    return table(CLAIM_COLUMNS, claims_module.evaluate_claims(list(claims), runs, loss_column))
