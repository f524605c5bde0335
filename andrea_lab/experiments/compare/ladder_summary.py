"""The ladder's one-sentence answer: at the cheapest rung that agrees with the top rung, what a decision costs.

Issue 54's question for a researcher is not only *whether* a small proxy predicts the large model but *what it
saves*: "at the cheapest rung that agrees with the top rung on >= 90 % of decisions, a decision costs X
CPU-minutes". Both halves are measured here, never assumed:

* **Agreement** is the ``loss`` row of :func:`andrea_lab.experiments.compare.ladder.decision_accuracy` (each
  variant at its own LR chosen on the other seeds), its point estimate against :data:`AGREEMENT`, with the
  bootstrap interval printed beside it so that a rung at 8 of 9 on 5 seeds reads as what it is.
* **Cost** of one decision at a rung is the CPU time of every run the decision needs there (both variants, all
  their LRs and seeds, grid extensions included): the sum of each run's wall time times the torch threads it ran
  on (summary.json ``wall_time_s`` and ``machine.threads``), averaged over the ladder's decisions. A rung with a
  run that recorded neither has no cost (said so), never a guess.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from andrea_lab.experiments.compare.ladder import Decision, finished_in
from andrea_lab.experiments.compare.runs_table import PRECISION, SCALE, THREADS, WALL_TIME
from andrea_lab.runs.machine import precision_name

#: The share of decisions a rung must get right to stand in for the top rung (issue 54's 90 %).
AGREEMENT = 0.9


def decision_minutes(runs: pd.DataFrame, rung: str, decision: Decision) -> float:
    """CPU-minutes of the runs one decision needs at ``rung``; NaN when one of them lacks its time or threads."""
    if SCALE not in runs or WALL_TIME not in runs or THREADS not in runs:
        return math.nan
    rows = runs[(runs[SCALE] == rung) & runs["variant"].isin((decision.a, decision.b))]
    seconds = pd.to_numeric(rows[WALL_TIME], errors="coerce") * pd.to_numeric(rows[THREADS], errors="coerce")
    return math.nan if rows.empty or seconds.isna().any() else float(seconds.sum()) / 60.0


def minutes_per_decision(runs: pd.DataFrame, rungs: Sequence[str], decisions: Sequence[Decision]) -> dict[str, float]:
    """Per rung, the mean CPU-minutes of a decision over the ladder's decisions (NaN where any is unknown)."""
    costs = {}
    for rung in rungs:
        each = [decision_minutes(runs, rung, decision) for decision in decisions]
        costs[rung] = math.nan if not each or any(math.isnan(c) for c in each) else sum(each) / len(each)
    return costs


def arithmetic(runs: pd.DataFrame, rungs: Sequence[str]) -> dict[str, str]:
    """Per rung, the precision its runs trained in (``fp32``, ``bf16-mixed``; both, comma-separated, where its
    runs differ; ``—`` where none recorded it). Why beside the accuracy: the sweep's speed rule chooses a rung's
    arithmetic (docs/performance.md), so rungs of one ladder may differ in it, and a reader of a trend across
    rungs should see where."""
    found = {}
    for rung in rungs:
        rows = runs[runs[SCALE] == rung] if SCALE in runs else runs.iloc[0:0]
        values = rows[PRECISION].dropna().astype(str) if PRECISION in rows else pd.Series([], dtype=str)
        words = sorted({precision_name(value) for value in values})
        found[rung] = ", ".join(words) or "—"
    return found


def _minutes(value: float) -> str:
    return "not recorded" if math.isnan(value) else f"{value:.0f} CPU-minutes"


def headline(table: pd.DataFrame, costs: Mapping[str, float]) -> str:
    """The sentence that opens docs/results.md, from the decision-accuracy table (its ``loss`` rows, in rung
    order, the top rung last) and :func:`minutes_per_decision`."""
    loss = table[table["kind"] == "loss"].reset_index(drop=True)
    top, finished = str(loss.iloc[-1]["rung"]), finished_in(table)
    missing = [str(rung) for rung in loss["rung"] if str(rung) not in finished]
    spent = ", ".join(f"{rung} {_minutes(costs.get(rung, math.nan))}" for rung in finished)
    if loss.iloc[-1]["status"] != "top":
        return (
            f"The ladder's top rung ({top}) has not finished, so no rung's agreement with it is measured yet "
            f"(finished: {', '.join(finished) or 'none'}; missing: {', '.join(missing)}). "
            + (f"A decision has cost, per rung finished: {spent}." if finished else "")
        ).rstrip()
    scored = loss[(loss["status"] == "finished") & loss["accuracy"].notna()]
    top_cost = _minutes(costs.get(top, math.nan))
    agreeing = scored[scored["accuracy"] >= AGREEMENT].sort_values("compute")
    if agreeing.empty:
        best = scored.sort_values("accuracy").iloc[-1] if not scored.empty else None
        closest = "" if best is None else f" (the closest: {best['rung']}, {_share(best)})"
        return (
            f"No rung below the top ({top}) agrees with it on {AGREEMENT * 100:.0f} % of the loss decisions{closest}; "
            f"a decision at the top rung costs {top_cost}."
        )
    row = agreeing.iloc[0]
    below = (
        " (its interval reaches below 90 %: on these seeds the agreement is not established)"
        if row["low"] < AGREEMENT
        else ""
    )
    return (
        f"At the cheapest rung that agrees with the top rung ({top}) on {AGREEMENT * 100:.0f} % or more of the loss "
        f"decisions, {row['rung']} ({row['compute_ratio']:.3g}x the top rung's 6·N·D; {_share(row)}){below}, a "
        f"decision costs {_minutes(costs.get(str(row['rung']), math.nan))}, against {top_cost} at the top rung."
    )


def _share(row: pd.Series) -> str:
    return f"{row['accuracy']:.2f} [{row['low']:.2f}, {row['high']:.2f}] of {int(row['decisions'])} decisions agree"
