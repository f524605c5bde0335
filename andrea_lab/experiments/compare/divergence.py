"""Divergence apart from loss: how often a variant gets stuck, with an exact interval, and paired tests.

A capped mean loss averages runs stuck on the unigram plateau (≈ 3.07 nats in the CPU suites) with runs
that trained (≈ 2.1–2.5), so "A has the lower loss" can mean "B got stuck more often". The report shows
each variant's divergence rate per LR with its Clopper–Pearson interval (exact: with 5 runs a normal
approximation is meaningless) beside the loss of the runs that trained, and claims target either:
``fewer_divergences`` (here) or ``lower_loss_trained`` (:mod:`andrea_lab.experiments.compare.claims`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

import pandas as pd
from scipy import stats as scipy_stats

from andrea_lab.experiments.compare.outcomes import OUTCOME, OUTCOME_SIZE, OUTCOME_STEP, RISE_STEP, with_outcomes
from andrea_lab.experiments.compare.stats import CONFIDENCE
from andrea_lab.runs.directory import format_lr
from andrea_lab.runs.outcome import BLEW_UP, REGRESSED, STUCK


def clopper_pearson(diverged: int, runs: int) -> tuple[float, float]:
    """The exact 95 % interval of a divergence rate ``diverged / runs``; (NaN, NaN) for no runs."""
    if runs == 0:
        return math.nan, math.nan
    interval = scipy_stats.binomtest(int(diverged), int(runs)).proportion_ci(CONFIDENCE, method="exact")
    return float(interval.low), float(interval.high)


def describe_rate(diverged: int, runs: int) -> str:
    """``3/5 [15 %, 95 %]``: the count and its exact interval (for a table cell)."""
    if runs == 0:
        return "0/0"
    low, high = clopper_pearson(diverged, runs)
    return f"{diverged}/{runs} [{low:.0%}, {high:.0%}]".replace("%", " %")


def describe_kinds(rows: pd.DataFrame) -> str:
    """How the runs of a table cell ended, where not plainly trained: ``stuck 1; blew up 1; regressed 2 (+0.354
    from 1034, +0.469 from 1040); recovered rises 3 (spikes, not counted)``. Empty when all trained plainly. The
    three failures are different things (andrea_lab.runs.outcome): a run that never left the unigram plateau, one
    that went non-finite or far above where it started, and one that trained and stayed worse to the end."""
    rows = with_outcomes(rows)
    parts = []
    for kind, label in ((STUCK, "stuck"), (BLEW_UP, "blew up")):
        count = int((rows[OUTCOME] == kind).sum())
        if count:
            parts.append(f"{label} {count}")
    regressed = rows[rows[OUTCOME] == REGRESSED]
    if len(regressed):
        pairs = sorted(zip(regressed[OUTCOME_STEP], regressed[OUTCOME_SIZE]), key=lambda sv: _sort_step(sv[0]))
        listed = ", ".join(f"{_signed_nat(size)} from {_step_text(step)}" for step, size in pairs)
        parts.append(f"regressed {len(regressed)} ({listed})")
    recovered = int(rows[RISE_STEP].notna().sum())
    if recovered:
        parts.append(f"recovered rises {recovered} (spikes, not counted)")
    return "; ".join(parts)


def _sort_step(step: object) -> float:
    return math.inf if pd.isna(step) else float(step)


def _step_text(step: object) -> str:
    return "an unknown step" if pd.isna(step) else f"step {int(step)}"


def _signed_nat(size: object) -> str:
    return "by an unknown amount" if pd.isna(size) else f"{float(size):+.3f}".replace("-", "−")


def any_outcome_to_tell(runs: pd.DataFrame) -> bool:
    """Whether some run failed or had a rise that came back (the per-LR table then says how each cell's runs
    ended: a count alone would not tell a stuck run from a blow-up, a regression, or a spike that recovered)."""
    if "status" not in runs:
        return False
    ended = with_outcomes(runs)
    return bool(ended["failed"].any() or ended[RISE_STEP].notna().any())


def failure_breakdown(counted: pd.DataFrame, a: str, b: str, lrs: Optional[Mapping[str, float]] = None) -> str:
    """``failures: A stuck 9, regressed 1; B none``: what the failures a ``fewer_divergences`` count counts
    were, per variant (over the grid, or at its fixed LR)."""
    described = []
    for name in (a, b):
        rows = counted[counted["variant"] == name]
        if lrs is not None:
            rows = rows[rows["lr"] == lrs[name]]
        counts = [f"{label} {int(rows[column].sum())}" for column, label in FAILURE_LABELS if rows[column].any()]
        described.append(f"{name} {', '.join(counts) or 'none'}")
    return "failures: " + "; ".join(described)


def mostly_stuck(counted: pd.DataFrame, lrs: Mapping[str, float]) -> str:
    """``post stuck 9/10 at 4e-3: it measures the unigram plateau, not a trained model's loss`` where, at a loss
    claim's fixed LRs (``{variant: lr}``), most runs of either side never left the plateau; "" otherwise. Such a
    difference is how often one side got stuck, in nats (issue 56: pre − post = −0.851 at 4e-3 with post stuck
    in 9 of 10 seeds, −0.025 with each at its own LR)."""
    stuck = []
    for name, lr in lrs.items():
        rows = counted[(counted["variant"] == name) & (counted["lr"] == lr)]
        count = int(rows["stuck"].sum())
        if len(rows) and 2 * count > len(rows):
            stuck.append(f"{name} stuck {count}/{len(rows)} at {format_lr(lr)}")
    return f"{'; '.join(stuck)}: it measures the unigram plateau, not a trained model's loss" if stuck else ""


#: The counted runs' 0/1 columns of the failures, in the order a row names them.
FAILURE_LABELS = (("stuck", "stuck"), ("regressed", "regressed"), ("blew_up", "blew up"))


def gave_way_lines(runs: pd.DataFrame) -> list[str]:
    """A table per variant of which precursor signal left its band first before each run's divergence (else its
    first spike), by metric, with the median lead in steps over the loss (summary.json ``gave_way_first``;
    docs/stability.md). Empty when no run has the record (runs made before it, or without events)."""
    if "gave_way_first" not in runs or not runs["gave_way_first"].notna().any():
        return []
    lines = [
        "## What gave way first",
        "",
        "Per variant, over its runs with a divergence or a spike: the precursor signal that left its running band "
        "first (by metric; the event in brackets), how many runs, and the median and range of its lead over the "
        "loss in steps (a multiple of the probe interval). Runs where nothing left its band first are counted as "
        "`none`.",
        "",
        "| variant | signal (event) | runs | median lead [min, max] |",
        "| --- | --- | --- | --- |",
    ]
    recorded = runs[runs["gave_way_first"].notna()]
    # In the suite's variant order, whichever way the frame came (run directories as found, or a sorted runs.csv):
    # one comparison.md for the same runs.
    order = [column for column in ("variant_index", "variant") if column in recorded]
    recorded = recorded.sort_values(order, kind="stable", na_position="last")
    for variant, rows in recorded.groupby("variant", sort=False):
        event_signal = rows["gave_way_first"].astype(str).str.split(": ", n=1, expand=True)
        families = event_signal[1].str.split("/").str[0] + " (" + event_signal[0] + ")"
        for family, members in rows.groupby(families.values, sort=True):
            lead = members["gave_way_lead"] if "gave_way_lead" in members else pd.Series(dtype=float)  # all none
            leads = pd.to_numeric(lead, errors="coerce").dropna()
            spread = "n/a" if leads.empty else f"{leads.median():g} [{leads.min():g}, {leads.max():g}]"
            lines.append(f"| {variant} | {family} | {len(members)} | {spread} |")
    return [*lines, ""]


def ceilings(counted: pd.DataFrame, variant: str) -> dict[int, float]:
    """Per seed, the variant's LR ceiling in octaves: log2 of the highest LR of its grid at which neither that run
    nor any at a lower LR diverged; one octave below the grid's lowest LR where that one diverged already.
    A seed missing a run of the grid has no ceiling (left out)."""
    rows = counted[counted["variant"] == variant]
    grid = sorted(rows["lr"].astype(float).unique())
    flags = rows.pivot_table(index="seed", columns="lr", values="diverged", aggfunc="max").reindex(columns=grid)
    found: dict[int, float] = {}
    for seed, row in flags.iterrows():
        if row.isna().any():
            continue
        ceiling = math.log2(grid[0]) - 1.0
        for lr in grid:
            if bool(row[lr]):
                break
            ceiling = math.log2(lr)
        found[int(seed)] = ceiling
    return found


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p: the discordant pairs as a binomial(only_a + only_b, 1/2); 1 with none."""
    discordant = only_a + only_b
    return float(scipy_stats.binomtest(only_a, discordant, 0.5).pvalue) if discordant else 1.0


@dataclass(frozen=True)
class PairedDivergences:
    """Runs of A and B paired by (lr, seed) or, at fixed LRs, by seed; only discordant pairs inform."""

    pairs: int
    diverged_a: int
    diverged_b: int
    only_a: int
    only_b: int
    unit: str  # what a pair is: "(lr, seed)" or "seed"
    what: str = "diverged"  # the outcome counted, as the row says it

    @property
    def p_value(self) -> float:
        return mcnemar_exact_p(self.only_a, self.only_b)

    def describe(self, a: str, b: str) -> str:
        return (
            f"{self.what} {a} {self.diverged_a}/{self.pairs}, {b} {self.diverged_b}/{self.pairs} paired by "
            f"{self.unit}; discordant pairs {self.only_a + self.only_b} ({a} only {self.only_a}, "
            f"{b} only {self.only_b}); exact McNemar"
        )


#: How a count's row names what it counted (the counted runs' column: claim_spec.COUNT_KINDS).
COUNTED_AS = {"diverged": "failed (stuck, regressed or blew up)", "stuck": "stuck", "regressed": "regressed"}
COUNTED_AS["blew_up"] = "blew up"


def paired_divergences(
    counted: pd.DataFrame, a: str, b: str, lrs: Optional[Mapping[str, float]] = None, column: str = "diverged"
) -> PairedDivergences:
    """Over the whole grid (pairs by (lr, seed)), or with ``lrs`` ({a: lr, b: lr}) each variant at its fixed
    LR, paired by seed; ``column`` is the outcome counted (``diverged``: any failure; ``stuck``, ``regressed``,
    ``blew_up``: andrea_lab.experiments.compare.outcomes)."""
    if lrs is None:
        flags = counted.pivot(index=["lr", "seed"], columns="variant", values=column)
        flags = flags.reindex(columns=[a, b]).dropna()
        first, second, unit = flags[a].astype(bool), flags[b].astype(bool), "(lr, seed)"
    else:

        def at(name: str) -> pd.Series:
            rows = counted[(counted["variant"] == name) & (counted["lr"] == lrs[name])]
            return rows.set_index("seed")[column].astype(bool)

        joined = pd.concat([at(a).rename("a"), at(b).rename("b")], axis=1).dropna()
        first, second, unit = joined["a"].astype(bool), joined["b"].astype(bool), "seed"
    return PairedDivergences(
        len(first),
        int(first.sum()),
        int(second.sum()),
        int((first & ~second).sum()),
        int((second & ~first).sum()),
        unit,
        COUNTED_AS[column],
    )


def stuck_windows(runs: pd.DataFrame) -> dict[str, Optional[int]]:
    """Per variant, the step its runs' stuck-at-unigram window started at: ``stuck_after`` where the run's
    config set it, else its ``warmup_steps`` (the monitor's default); None where neither is known (runs.csv
    from before these columns). A variant whose runs disagree gets its smallest window."""
    windows: dict[str, Optional[int]] = {}
    for variant, rows in runs.groupby("variant", sort=False):
        stuck = pd.to_numeric(rows.get("stuck_after", pd.Series(index=rows.index, dtype=float)), errors="coerce")
        warmup = pd.to_numeric(rows.get("warmup_steps", pd.Series(index=rows.index, dtype=float)), errors="coerce")
        start = stuck.where(stuck.notna(), warmup).dropna()
        windows[str(variant)] = int(start.min()) if len(start) else None
    return windows


def stuck_window_note(runs: pd.DataFrame) -> Optional[str]:
    """One sentence on whether divergence counts are on equal footing across the variants (None when the
    runs do not say)."""
    windows = stuck_windows(runs)
    if not windows or any(start is None for start in windows.values()):
        return None
    if len(set(windows.values())) == 1:
        return f"Stuck-at-unigram window: from step {next(iter(windows.values()))} for every variant."
    listed = ", ".join(
        f"{name} {start}" for name, start in sorted(windows.items(), key=lambda item: (item[1], item[0]))
    )
    tied = "stuck_after" not in runs or runs["stuck_after"].isna().all()
    why = (
        "these runs predate the equal stuck-at-unigram window, and each variant's window started at its own warmup step"
        if tied
        else "the variants' stuck-at-unigram windows started at different steps"
    )
    return f"Divergence counts are not on equal footing across these variants: {why} ({listed}; docs/stability.md)."
