"""Speed-up against size (issue 55, item 3): how many fewer steps a variant needs than the reference, from
separately planned runs, at each model size, beside Marin's published figure; and whether it shrinks with size.

A suite plans token budgets as scales that differ only in ``trainer.max_steps`` (``d64-s250``, ``d64-s500``: the
same model, each run's schedule ending at its own budget). Scales grouped by their other overrides are one
*size*, the ``max_steps`` of each its *budget*. At each size the target is the reference's (A's) final held-out
loss at its longest budget, per seed; a variant B's speed-up is A's steps over the shortest of B's budgets whose
run reaches it (:mod:`andrea_lab.experiments.compare.planned_steps`), paired by seed. With a few budgets that is
a bracket, not a point: B reaching it at its shortest budget says ">= 2x" (it may need fewer), reaching it at
500 after missing at 250 says "1x to < 2x", and no budget reaching it "< 1x: not reached". Each variant is at
its tuned point in each cell: the LR compare chooses (its only one where a search tuned it, whose judged runs
are the only ones compare reads) on the choosing score, each run's capped loss (a diverged run at its loss at
init).

Whether the speed-up shrinks with size is read off the brackets alone: it shrinks when every seed's bracket at
the larger size lies below every seed's at the smaller one (sizes in the suite's order), grows when above, and
is "not determined" otherwise — overlapping brackets cannot show a trend, whatever their midpoints suggest.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import pandas as pd

from andrea_lab.experiments.compare import compare, csv_cells, report, stats
from andrea_lab.experiments.compare.compare import Column
from andrea_lab.experiments.compare.optimum_edges import SEARCH_EDGE
from andrea_lab.experiments.compare.planned_steps import Reach, planned_reach
from andrea_lab.experiments.compare.published_speedups import published_speedup
from andrea_lab.experiments.compare.runs_table import SCALE

#: The override that makes two scales one size at two budgets.
BUDGET_KEY = "trainer.max_steps"
OPTIMIZER_KEY = "model.optimizer"
SPEEDUPS_CSV = "speedups.csv"
HEADING = "## Speed-up against size"


@dataclass(frozen=True)
class Size:
    """One model size: its name and its budgets (planned steps -> the scale that runs it), shortest first."""

    name: str
    budgets: dict[int, str]


def sizes(scales: Sequence[Any]) -> list[Size]:
    """The sizes of a suite's scales (objects with ``name`` and ``overrides``) that have at least two budgets,
    in the suite's order: scales grouped by their overrides other than ``trainer.max_steps``. A scale without
    a whole-number ``max_steps`` of its own is no budget."""
    groups: dict[tuple, list[Any]] = {}
    for scale in scales:
        steps = scale.overrides.get(BUDGET_KEY)
        if isinstance(steps, int) and not isinstance(steps, bool):
            rest = tuple(sorted((key, repr(value)) for key, value in scale.overrides.items() if key != BUDGET_KEY))
            groups.setdefault(rest, []).append(scale)
    found = []
    for members in groups.values():
        budgets = {int(scale.overrides[BUDGET_KEY]): scale.name for scale in members}
        if len(budgets) >= 2:
            found.append(Size(_size_name([scale.name for scale in members]), dict(sorted(budgets.items()))))
    return found


def _size_name(names: Sequence[str]) -> str:
    """``d64`` for ``d64-s250`` and ``d64-s500``: their common start up to its last separator (all of it where it
    has none), else the names joined."""
    prefix = os.path.commonprefix(list(names))
    cut = max(prefix.rfind(separator) for separator in "-_.")
    return (prefix[:cut] if cut > 0 else prefix) or "/".join(names)


@dataclass(frozen=True)
class Bracket:
    """A speed-up known to lie in ``[low, high)``: ``high`` infinite where B's shortest budget already reached the
    target (it may need fewer steps), ``low`` 0 where no budget did."""

    low: float
    high: float

    @classmethod
    def of(cls, reach: Reach, longest: int) -> "Bracket":
        """The speed-up bracket of one seed's reach; ``longest``: B's longest budget (which missed, if none hit)."""
        if reach.reached is None:
            return cls(0.0, reach.a_steps / longest)
        return cls(reach.a_steps / reach.reached, math.inf if reach.missed is None else reach.a_steps / reach.missed)

    def describe(self) -> str:
        if math.isinf(self.high):
            return f">= {_times(self.low)}"
        if self.low == 0:
            return f"< {_times(self.high)}: not reached"
        return f"{_times(self.low)} to < {_times(self.high)}"


def _times(value: float) -> str:
    return f"{value:.2g}x"


def span(brackets: Sequence[Bracket]) -> Bracket:
    """The bracket holding every seed's: the lowest low to the highest high."""
    return Bracket(min(b.low for b in brackets), max(b.high for b in brackets))


def summary(brackets: Sequence[Bracket]) -> str:
    """``>= 2x (3 of 3)``, or each distinct bracket with its count, highest first."""
    counts = Counter(sorted(brackets, key=lambda b: (-b.low, -b.high)))
    return "; ".join(f"{bracket.describe()} ({count} of {len(brackets)})" for bracket, count in counts.items())


def tuned_losses(counted: pd.DataFrame, variant: str) -> tuple[dict[int, float], str]:
    """One cell's (one scale's counted runs) seed -> capped loss of ``variant`` at its tuned point, the LR chosen
    as compare chooses it, and where that point is at an edge of what was tried, the words saying so ('')."""
    if not (counted["variant"] == variant).any():
        return {}, ""
    table = stats.loss_table(counted, variant)
    best = stats.best_lr(stats.choice_table(counted, variant))
    edges = [stats.edge_flag(best, table.index) or ""]
    if SEARCH_EDGE in counted:
        edges += sorted(set(counted.loc[counted["variant"] == variant, SEARCH_EDGE].dropna()))
    losses = {int(seed): float(loss) for seed, loss in table.loc[best].dropna().items()}
    return losses, "; ".join(text for text in edges if text)


def _planned(runs: pd.DataFrame, size: Size, variant: str, loss_column: str) -> tuple[dict, list[str]]:
    """``variant``'s planned losses at ``size`` (steps -> seed -> loss) and its caveats, one per budget."""
    planned, caveats = {}, []
    for steps, scale in size.budgets.items():
        cell = runs[(runs[SCALE] == scale) & runs["lr"].notna()]
        losses, caveat = tuned_losses(stats.counted_runs(cell, loss_column), variant) if len(cell) else ({}, "")
        if losses:
            planned[steps] = losses
        if caveat:
            caveats.append(f"{variant} at {scale}: {caveat}")
    return planned, caveats


def speedup_row(runs: pd.DataFrame, size: Size, reference: str, variant: str, loss_column: str) -> dict[str, Any]:
    """One row of the table: ``variant`` against ``reference`` at ``size``; ``brackets`` holds each seed's."""
    a, a_caveats = _planned(runs, size, reference, loss_column)
    b, b_caveats = _planned(runs, size, variant, loss_column)
    row = {"size": size.name, "budgets": ", ".join(map(str, size.budgets)), "variant": variant}
    row["caveat"] = "; ".join(a_caveats + b_caveats)
    if not a or not b:
        missing = " and ".join(name for name, planned in ((reference, a), (variant, b)) if not planned)
        return {**row, "target": "", "seeds": "", "speedup": f"no counted runs of {missing}", "brackets": []}
    a_steps = max(a)
    paired = set(a[a_steps]).intersection(*(set(losses) for losses in b.values()))
    target = {a_steps: {seed: a[a_steps][seed] for seed in paired}}
    reaches = planned_reach(target, {steps: {s: b[steps][s] for s in paired} for steps in b}, a_steps)
    brackets = [Bracket.of(reach, max(b)) for reach in reaches]
    reached = sum(reach.reached is not None for reach in reaches)
    return {
        **row,
        "target": f"{reference} at {a_steps} steps",
        "seeds": f"{reached} of {len(reaches)}",
        "speedup": summary(brackets) if brackets else "no seed run by both at every budget",
        "brackets": brackets,
    }


def speedup_table(
    runs: pd.DataFrame,
    found: Sequence[Size],
    reference: str,
    optimizers: Mapping[str, Optional[str]],
    parameters: Mapping[str, int],
) -> pd.DataFrame:
    """One row per (size, variant other than the reference), in size then suite order: the budgets, the target,
    how many paired seeds reached it, their brackets (``speedup``; each seed's in ``brackets``), the size's
    non-embedding parameters (``parameters``: scale name -> N, '' where not counted), the published figure for
    the variant's optimizer (``optimizers``: variant -> ``model.optimizer``) and any tuned point at an edge."""
    runs = stats.set_aside_unscored(runs)
    loss_column = compare.scored_loss_column(runs)
    names = [name for name in compare.variant_order(runs) if name != reference]
    rows = []
    for size in found:
        counted_n = parameters.get(next(iter(size.budgets.values())))
        for name in names:
            published = published_speedup(optimizers.get(name))
            rows.append(
                {
                    **speedup_row(runs, size, reference, name, loss_column),
                    "parameters": "" if counted_n is None else f"{counted_n / 1e6:.2f}M",
                    "published": published.describe() if published else "",
                }
            )
    return pd.DataFrame(rows, columns=[c.key for c in COLUMNS] + ["brackets"])


COLUMNS = [
    Column("size", "size", lambda v: v),
    Column("parameters", "N (non-embedding)", lambda v: v, lambda v: v or "n/a"),
    Column("budgets", "budgets (steps)", lambda v: v),
    Column("variant", "variant", lambda v: v),
    Column("target", "target: final loss of", lambda v: v),
    Column("seeds", "seeds reaching", lambda v: v),
    Column("speedup", "speed-up (steps), per seed", lambda v: v),
    Column("published", "Marin's speed-up over AdamW", lambda v: v, lambda v: v or "none"),
    Column("caveat", "tuned point at an edge", lambda v: v),
]


def trend_sentence(variant: str, reference: str, spans: Sequence[tuple[str, Bracket]]) -> str:
    """Whether ``variant``'s speed-up over ``reference`` shrinks with size, from each size's :func:`span` (in the
    suite's order): only where every pair of neighbouring sizes' spans do not overlap, all the same way."""
    shown = "; ".join(f"{size} {bracket.describe()}" for size, bracket in spans) or "none"
    if len(spans) < 2:
        return f"{variant}: not determined: a speed-up at {len(spans)} size(s) only ({shown})."
    pairs = list(zip(spans, spans[1:]))
    if all(later.high <= earlier.low for (_, earlier), (_, later) in pairs):
        way = "shrinks"
    elif all(later.low >= earlier.high for (_, earlier), (_, later) in pairs):
        way = "grows"
    else:
        return f"{variant}: not determined: the brackets overlap ({shown})."
    return f"{variant}: the speed-up over {reference} {way} with size ({shown}): no size's bracket overlaps the next."


def trend_sentences(table: pd.DataFrame, reference: str) -> list[str]:
    """One sentence per variant (:func:`trend_sentence`), from the table's rows that have brackets."""
    sentences = []
    for variant, rows in table.groupby("variant", sort=False):
        spans = [(row.size, span(row.brackets)) for row in rows.itertuples() if row.brackets]
        sentences.append(trend_sentence(str(variant), reference, spans))
    return sentences


def speedup_markdown(table: pd.DataFrame, reference: str) -> str:
    """The section as comparison.md and docs/results.md show it: the table, then one sentence per variant."""
    return "\n".join(
        [
            HEADING,
            "",
            f"Each variant's speed-up over {reference} at each size: {reference}'s planned steps over the shortest of "
            f"the variant's separately planned runs that reaches {reference}'s final held-out loss at its longest "
            "budget, per seed (paired), each at its tuned point; a bracket, since the budgets are few. Marin's figure: "
            "Wen et al. 2025 as its abstract states it, and the bound of its summary (marin-community/marin#1290); "
            'finer figures were not available here (docs/experiments.md, "Speed-up against size").',
            "",
            report.markdown_table(COLUMNS, table),
            "",
            *[f"- {sentence}" for sentence in trend_sentences(table, reference)],
        ]
    )


def speedup_block(suite: Any, runs: pd.DataFrame, parameters: Optional[Mapping[str, int]] = None) -> Optional[str]:
    """The speed-up against size of a suite (a :class:`andrea_lab.experiments.sweep.suite.Suite`, or None) whose
    scales are sizes at several budgets, from its runs (a runs.csv alone regenerates it: docs/results.md's
    ``speedups`` block); None for any other suite or one without runs there."""
    table = _table(suite, runs, parameters or {})
    return None if table is None else speedup_markdown(table, _reference(suite))


def _reference(suite: Any) -> str:
    return suite.reference or suite.variants[0].name


def _table(suite: Any, runs: pd.DataFrame, parameters: Mapping[str, int]) -> Optional[pd.DataFrame]:
    found = sizes(suite.scales) if suite is not None else []
    runs = runs[(runs["suite"] == suite.name) & runs[SCALE].notna()] if found and SCALE in runs else runs.iloc[:0]
    if not found or runs.empty:
        return None
    optimizers = {v.name: v.overrides.get(OPTIMIZER_KEY, suite.common.get(OPTIMIZER_KEY)) for v in suite.variants}
    table = speedup_table(runs, found, _reference(suite), optimizers, parameters)
    return table if len(table) else None


def print_speedup_report(
    suite: Any, runs: pd.DataFrame, written: Mapping[str, Mapping[str, Any]], parameters: Mapping[str, int]
) -> Optional[str]:
    """For a suite whose scales are sizes at several budgets (:func:`sizes`) and was compared (``written``, what
    :func:`andrea_lab.experiments.compare.outputs.write_outputs` returned): the section appended to its
    ``comparison.md``, ``speedups.csv`` beside it, the section printed (``andrea compare``'s output) and returned
    as Markdown. None for any other suite."""
    result = written.get(suite.name) if suite is not None else None
    table = _table(suite, runs, parameters) if result is not None else None
    if table is None:
        return None
    markdown = speedup_markdown(table, _reference(suite))
    comparison = Path(result["files"]["markdown"])
    text = comparison.read_text(encoding="utf-8").rstrip("\n")
    comparison.write_text(f"{text}\n\n{markdown}\n", encoding="utf-8")
    csv_cells.write_csv(table.drop(columns="brackets"), comparison.parent / SPEEDUPS_CSV)
    print(f"{markdown}\n\n  {'speedups_csv':<26} {comparison.parent / SPEEDUPS_CSV}")
    return markdown
