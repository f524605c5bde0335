"""Does a small rung's verdict predict the top rung's? Decision accuracy of a ladder (issue 54).

A ladder is a suite whose scales grow in training compute (rungs) and which names its *decisions*: pairs of
variants whose order a researcher would act on. DataDecide (AI2, 2025) measures what a proxy is worth by its
*decision accuracy*: the share of decisions whose sign at the small scale matches the sign at the large one.
That is the question every verdict of docs/results.md leaves open (they are all at one small rung), so this
module answers it for the project's own ladder, per lower rung, for three kinds of decision:

* ``loss``: A − B held-out loss, each variant at its own best LR *chosen on the other seeds* (the cross-fit of
  :mod:`andrea_lab.experiments.compare.selection`, so that no rung's sign is a winner's curse);
* ``lr_sensitivity``: A − B LR sensitivity (Wortsman et al. 2023), per seed, on the LRs both ran (at least
  two: a grid extended for one variant, or a per-variant top bracket, leaves the shared part);
* ``highest_lr``: log10 of the highest LR at which the seed's run trained (did not diverge), A − B, on the LRs
  both variants ran, and only for a seed where one of them gave way somewhere (:func:`ceiling_effects`).

Why a bootstrap over seeds and not a formula: accuracy is a share of a handful of signs, each itself noisy.
Resampling seeds *within each rung* (the top rung too: its signs are also estimates) and recomputing every
decision's sign gives the interval directly. All decisions of a rung share one resample, as they share seeds.
The per-seed effects are taken once (the LR each seed is judged at stays the one chosen on the other seeds of
the original sample), so a resample reweights seeds; it does not re-run the LR choice.

A rung still running (a planned run not finished, or no run at all) is reported *missing*: its row has no
accuracy, never a partial one presented as final; a missing top rung leaves every accuracy empty.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from andrea_lab.experiments.compare import stats
from andrea_lab.experiments.compare.runs_table import SCALE

KINDS = ("loss", "lr_sensitivity", "highest_lr")
#: Bootstrap replicates: the interval's percentiles move by well under a decision's share (1/8) at this count.
REPLICATES = 2000
CONFIDENCE = 0.95
MISSING = "missing"


@dataclass(frozen=True)
class Decision:
    """A pair of variants whose order the ladder asks about; A − B < 0 means A has the lower value."""

    a: str
    b: str

    @property
    def name(self) -> str:
        return f"{self.a} vs {self.b}"


def _highest_trained(counted: pd.DataFrame, variant: str, lrs: Sequence[float]) -> pd.Series:
    """Per seed: log10 of the highest of ``lrs`` whose run did not diverge (NaN when every one diverged)."""
    rows = counted[(counted["variant"] == variant) & counted["lr"].isin(lrs) & ~counted["diverged"].astype(bool)]
    return np.log10(rows.groupby("seed")["lr"].max().astype(float))


def ceiling_effects(counted: pd.DataFrame, decision: Decision, seeds: Sequence[int]) -> dict[int, float]:
    """Per seed: A − B in log10 of the highest LR that trained, on the LRs *both* ran. Why only those: a grid
    extended for one variant (its optimum at the top edge) or a per-variant bracket at the top rung would
    otherwise make the variant with the higher grid look more stable. A seed where neither diverged at any
    shared LR is censored for both (which would give way first is not measured): no value, not a tie."""
    lrs = sorted(
        set(counted.loc[counted["variant"] == decision.a, "lr"])
        & set(counted.loc[counted["variant"] == decision.b, "lr"])
    )
    shared = counted[counted["lr"].isin(lrs) & counted["variant"].isin((decision.a, decision.b))]
    gave_way = set(shared.loc[shared["diverged"].astype(bool), "seed"].astype(int))
    ceiling = _highest_trained(counted, decision.a, lrs) - _highest_trained(counted, decision.b, lrs)
    counted_seeds = gave_way & set(map(int, seeds))
    return {int(s): float(v) for s, v in ceiling.items() if int(s) in counted_seeds}


def decision_effects(counted: pd.DataFrame, decision: Decision) -> dict[str, dict[int, float]]:
    """Per kind (:data:`KINDS`), the per-seed A − B of one decision on one rung's counted runs."""
    table_a, table_b = stats.loss_table(counted, decision.a), stats.loss_table(counted, decision.b)
    seeds = table_a.columns.intersection(table_b.columns)
    a, b = table_a[seeds], table_b[seeds]
    choose_a, choose_b = stats.choice_table(counted, decision.a)[seeds], stats.choice_table(counted, decision.b)[seeds]
    loss = stats.values_at(a, stats.held_out_best_lrs(choose_a))
    loss_b = stats.values_at(b, stats.held_out_best_lrs(choose_b))
    effects = {"loss": {int(s): loss[s] - loss_b[s] for s in loss}}
    shared = a.index.intersection(b.index)
    if len(shared) > 1:  # on the LRs both ran: another grid measures another sensitivity (stats.compare_pair)
        gap = stats.lr_sensitivity_per_seed(a.loc[shared]) - stats.lr_sensitivity_per_seed(b.loc[shared])
        effects["lr_sensitivity"] = {int(s): float(v) for s, v in gap.items()}
    else:
        effects["lr_sensitivity"] = {}
    effects["highest_lr"] = ceiling_effects(counted, decision, list(seeds))
    return effects


def rung_effects(counted: pd.DataFrame, decisions: Sequence[Decision]) -> tuple[np.ndarray, list[int]]:
    """One rung's per-seed effects as an array (kinds, decisions, seeds), NaN where a seed lacks one; and
    the seeds (the array's last axis)."""
    per_decision = [decision_effects(counted, decision) for decision in decisions]
    seeds = sorted({seed for effects in per_decision for kind in KINDS for seed in effects[kind]})
    array = np.full((len(KINDS), len(decisions), len(seeds)), math.nan)
    for d, effects in enumerate(per_decision):
        for k, kind in enumerate(KINDS):
            for s, seed in enumerate(seeds):
                array[k, d, s] = effects[kind].get(seed, math.nan)
    return array, seeds


def _signs(effects: np.ndarray) -> np.ndarray:
    """Sign of the mean over seeds (last axis); NaN where no seed has a value (an undecided decision, for
    which nanmean's warning says nothing new)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.sign(np.nanmean(effects, axis=-1))


def accuracy(rung_signs: np.ndarray, top_signs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per kind (first axis): the share of decisions whose sign at the rung equals the top's, and how many
    decisions were counted (a decision counts when both signs are defined and the top's is not a tie)."""
    counted = ~np.isnan(rung_signs) & ~np.isnan(top_signs) & (top_signs != 0)
    agree = (rung_signs == top_signs) & counted
    n = counted.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, agree.sum(axis=-1) / np.maximum(n, 1), math.nan), n


def bootstrap_accuracy(
    rung: np.ndarray, top: np.ndarray, replicates: int = REPLICATES, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval (per kind) of the accuracy when the seeds of the rung and of the top rung are
    resampled with replacement, independently (different rungs ran different models)."""
    rng = np.random.default_rng(seed)
    values = np.empty((replicates, rung.shape[0]))
    for r in range(replicates):
        rung_sample = rung[..., rng.integers(0, rung.shape[-1], rung.shape[-1])]
        top_sample = top[..., rng.integers(0, top.shape[-1], top.shape[-1])]
        values[r] = accuracy(_signs(rung_sample), _signs(top_sample))[0]
    tail = (1 - CONFIDENCE) / 2 * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a kind with no counted decision: NaN, said as such
        return np.nanpercentile(values, tail, axis=0), np.nanpercentile(values, 100 - tail, axis=0)


def planned_cells(cells: Iterable[tuple[str, str]]) -> dict[str, Counter]:
    """Runs planned per rung and variant, from ``(rung, variant)`` per planned run (the sweep's plan)."""
    planned: dict[str, Counter] = {}
    for rung, variant in cells:
        planned.setdefault(rung, Counter())[variant] += 1
    return planned


def finished_rungs(
    runs: pd.DataFrame, rungs: Sequence[str], planned: Optional[Mapping[str, Mapping[str, int]]]
) -> list[str]:
    """The rungs whose every run has ended (counted): every variant with at least its planned runs (grid
    extensions add more) when ``planned`` says how many (:func:`planned_cells`), else at least one run; and
    none still running or interrupted. Per variant, not per rung: a variant added to the suite after a rung
    ran leaves that rung missing until its runs are in, however many extension runs the others added."""
    if SCALE not in runs:  # no run of a scaled suite at all (an empty directory)
        return []
    done = []
    for rung in rungs:
        rows = runs[runs[SCALE] == rung]
        have = rows.groupby("variant").size()
        wanted = (planned or {}).get(rung) or {}
        enough = not rows.empty and all(have.get(variant, 0) >= count for variant, count in wanted.items())
        if enough and bool(rows["status"].isin(stats.COUNTED_STATUSES).all()):
            done.append(rung)
    return done


def _rung_frame(
    rung: str, compute: Mapping[str, float], top: str, status: str, values: Optional[tuple] = None
) -> list[dict]:
    """The table's rows of one rung, one per kind; NaN accuracy unless ``values`` (acc, n, low, high)."""
    ratio = compute[rung] / compute[top] if rung in compute and top in compute else math.nan
    rows = []
    for k, kind in enumerate(KINDS):
        acc, n, low, high = (v[k] for v in values) if values else (math.nan, 0, math.nan, math.nan)
        rows.append(
            dict(
                rung=rung,
                compute=compute.get(rung, math.nan),
                compute_ratio=ratio,
                kind=kind,
                accuracy=acc,
                low=low,
                high=high,
                decisions=int(n),
                status=status,
            )
        )
    return rows


def decision_accuracy(
    runs: pd.DataFrame,
    rungs: Sequence[str],
    decisions: Sequence[Decision],
    compute: Mapping[str, float],
    planned: Optional[Mapping[str, Mapping[str, int]]] = None,
    loss_column: str = "heldout_loss",
) -> pd.DataFrame:
    """One row per (rung, kind): the rung's compute (6·N·D) and its ratio to the top rung's, the decision
    accuracy against the top rung (the last of ``rungs``) with its bootstrap interval, and the number of
    decisions counted; ``status`` is ``top``, ``finished`` or ``missing`` (no accuracy: runs not all ended)."""
    runs = stats.set_aside_unscored(runs)
    finished, top = finished_rungs(runs, rungs, planned), rungs[-1]
    effects = {
        rung: rung_effects(stats.counted_runs(runs[runs[SCALE] == rung], loss_column), decisions)[0]
        for rung in finished
    }
    rows = []
    for rung in rungs:
        if rung not in finished:
            rows += _rung_frame(rung, compute, top, MISSING)
        elif rung == top:
            rows += _rung_frame(rung, compute, top, "top")
        elif top not in finished:
            rows += _rung_frame(rung, compute, top, f"finished; top rung {MISSING}")
        else:
            acc, n = accuracy(_signs(effects[rung]), _signs(effects[top]))
            low, high = bootstrap_accuracy(effects[rung], effects[top])
            rows += _rung_frame(rung, compute, top, "finished", (acc, n, low, high))
    return pd.DataFrame(rows)


def finished_in(table: pd.DataFrame) -> list[str]:
    """The rungs of a :func:`decision_accuracy` table that are not :data:`MISSING`, in rung order."""
    loss = table[table["kind"] == KINDS[0]]
    return [str(rung) for rung, status in zip(loss["rung"], loss["status"]) if status != MISSING]


def _cell(row: pd.Series) -> str:
    if math.isnan(row["accuracy"]):
        return "—"
    return f"{row['accuracy']:.2f} [{row['low']:.2f}, {row['high']:.2f}] of {row['decisions']}"


def accuracy_markdown(table: pd.DataFrame) -> str:
    """The table as one Markdown table: rung × compute × ratio to the top × accuracy per kind × status, and
    each rung's CPU-minutes per decision and arithmetic where the table carries them (compare.ladder_summary)."""
    costs, arithmetic = "minutes_per_decision" in table, "arithmetic" in table
    lines = [
        "| rung | 6·N·D (FLOPs) | × top | "
        + " | ".join(f"{kind} accuracy [95 %] of n" for kind in KINDS)
        + (" | CPU-minutes per decision" if costs else "")
        + (" | arithmetic" if arithmetic else "")
        + " | status |",
        "|---|---|---|" + "---|" * (len(KINDS) + costs + arithmetic) + "---|",
    ]
    for rung, rows in table.groupby("rung", sort=False):
        first = rows.iloc[0]
        cells = [_cell(row) for _, row in rows.iterrows()]
        if costs:
            minutes = first["minutes_per_decision"]
            cells.append("—" if minutes is None or math.isnan(minutes) else f"{minutes:.0f}")
        if arithmetic:
            cells.append(str(first["arithmetic"]))
        lines.append(
            f"| {rung} | {first['compute']:.3g} | {first['compute_ratio']:.3g} | "
            + " | ".join(cells)
            + f" | {first['status']} |"
        )
    return "\n".join(lines)
