"""What a suite's fits cost here, from each run's measured wall time (summary.json ``wall_time_s``).

Why measured: a suite file's header estimates its cost before any run; the report says what it was, so the next
estimate starts from a measurement. Where the runs took more than one speed path (precision, compiled or not:
``andrea sweep --speed``, or a suite that compares paths, as speed_equivalence does), the report also gives each
path's mean wall time a fit and its fits per hour against the slowest path's, from the same sweep on the same
machine: what the faster path buys, beside the claims that say whether its loss is sound.
"""

from __future__ import annotations

import pandas as pd

from andrea_lab.experiments.compare.outcomes import DONE
from andrea_lab.experiments.compare.run_columns import COMPILED, PRECISION, WALL_TIME
from andrea_lab.runs.committed_table import compiled_of
from andrea_lab.runs.machine import precision_name


def cost_notes(runs: pd.DataFrame) -> list[str]:
    """The suite's fits' wall time, summed, and by speed path where there is more than one; none for runs
    recorded without it."""
    if WALL_TIME not in runs or runs[WALL_TIME].notna().sum() == 0:
        return []
    seconds = runs[WALL_TIME].dropna().astype(float)
    return [
        f"cost here: {len(seconds)} fits took {seconds.sum() / 60:,.1f} min of wall time in all "
        f"({seconds.mean():.0f} s per fit on average, {seconds.max():.0f} s the longest); a sweep at -j N "
        "takes about that divided by N, plus each run's start-up",
        *path_cost_notes(runs),
    ]


def path_cost_notes(runs: pd.DataFrame) -> list[str]:
    """``cost by speed path ...: fp32 1009 s a fit (n=8); bf16-mixed 543 s (n=8, 1.86x the fits per hour)``,
    slowest first, over the runs that ended (finished or diverged); empty where every timed run took one path (or
    none recorded its precision)."""
    if PRECISION not in runs:
        return []
    ended = runs["status"].isin(DONE) if "status" in runs else True  # a stopped run's time is part of a fit
    timed = runs[runs[WALL_TIME].notna() & runs[PRECISION].notna() & ended]
    compiled = _compiled(timed)
    said = {True: ", compiled", False: ""}
    path = timed[PRECISION].map(precision_name) + compiled.map(lambda flag: said.get(flag, ", compile not recorded"))
    by_path = timed.groupby(path)[WALL_TIME].agg(["mean", "size"]).sort_values("mean", ascending=False)
    if len(by_path) < 2:
        return []
    slowest = float(by_path["mean"].iloc[0])
    parts = [
        f"{name} {row['mean']:.0f} s a fit (n={int(row['size'])}"
        + ("" if index == 0 else f", {slowest / row['mean']:.2f}x the fits per hour")
        + ")"
        for index, (name, row) in enumerate(by_path.iterrows())
    ]
    return [
        "cost by speed path (mean wall time a fit; fits per hour against the slowest path's, same sweep and "
        f"machine): {'; '.join(parts)}"
    ]


def _compiled(runs: pd.DataFrame) -> pd.Series:
    """Each run's compile (True or False). Where a row does not say (a committed table from before its ``compiled``
    column, merged with new runs that do), it takes what the rest of its variant's runs of its precision and scale
    say when they agree: the sweep trains a rung's variant on one path. Unknown stays unknown (NaN)."""
    if COMPILED not in runs:
        return pd.Series(False, index=runs.index)
    keys = [column for column in ("scale", "variant", PRECISION) if column in runs]
    said = runs[COMPILED].map(compiled_of)  # as andrea sweep --from-table reads the cell
    agreed = said.groupby([runs[key].fillna("") for key in keys]).transform(
        lambda values: values.dropna().iloc[0] if values.dropna().nunique() == 1 else float("nan")
    )
    return said.fillna(agreed)
