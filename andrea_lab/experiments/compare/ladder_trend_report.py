"""The ladder's trends as compare reports them: each variant's loss against compute, each decision's effect.

:mod:`andrea_lab.experiments.compare.ladder_trends` fits the two forms; this module fits them on the rungs that
have finished and says what they give at the top rung's compute, with the standard error the fit propagates.
Why beside the decision-accuracy table and not only in the prediction file: the prediction is frozen before the
top rung runs, but a reader of a partial ladder wants to see where the trends point now (and a trend that
cannot be fitted yet, with too few rungs, is said so instead of drawn through two points).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from andrea_lab.experiments.compare import ladder_trends
from andrea_lab.experiments.compare.ladder import Decision


def _row(kind: str, name: str, rungs: Sequence[str], fit, target: float, describe) -> dict:
    try:
        fitted = fit()
    except (ValueError, RuntimeError) as error:  # too few computes; curve_fit's "optimal parameters not found"
        return dict(
            kind=kind, name=name, rungs=", ".join(rungs), trend=f"not fitted: {error}", at_top=math.nan, se=math.nan
        )
    at = fitted.predict(target)
    return dict(kind=kind, name=name, rungs=", ".join(rungs), trend=describe(fitted), at_top=at.value, se=at.se)


def _power_law(fit: ladder_trends.PowerLaw) -> str:
    """E and alpha with their standard errors; a parameter the fit left on a bound of its range is said to be
    there instead (PowerLaw.at_bound): its covariance is no uncertainty (the bound held it, not the rungs)."""
    errors = np.sqrt(np.clip(np.diag(fit.covariance), 0.0, None))
    return ", ".join(_parameter(fit, name, index, errors[index]) for name, index in (("E", 0), ("alpha", 2)))


def _parameter(fit: ladder_trends.PowerLaw, name: str, index: int, error: float) -> str:
    value = fit.parameters[index]
    side = fit.at_bound(index)
    return (
        f"{name} {value:.3f} ± {error:.3f}"
        if side is None
        else f"{name} {value:.3f} (at its {side} bound: not pinned by these rungs)"
    )


def _log_linear(fit: ladder_trends.LogLinear) -> str:
    return f"{fit.slope:+.3f} nat per decade of compute"


def trend_table(
    runs: pd.DataFrame, rungs: Sequence[str], compute: Mapping[str, float], decisions: Sequence[Decision], target: float
) -> pd.DataFrame:
    """One row per variant (loss against compute: the power law with an irreducible term) and per decision
    (effect against log compute: a line), fitted on ``rungs`` (those finished), with the value at ``target``."""
    return trend_rows(*ladder_trends.ladder_points(runs, rungs, compute, decisions), rungs, decisions, target)


def trend_rows(
    losses: Mapping[str, tuple], effects: Mapping[str, tuple], rungs: Sequence[str], decisions: Sequence[Decision],
    target: float,
) -> pd.DataFrame:  # fmt: skip
    """:func:`trend_table` from the points :func:`~andrea_lab.experiments.compare.ladder_trends.ladder_points`
    gave (the report draws the same points, so it reads them once)."""
    rows = [
        _row("loss", v, rungs, lambda p=points: ladder_trends.fit_power_law(*p), target, _power_law)
        for v, points in losses.items()
    ]
    rows += [
        _row("effect", d.name, rungs, lambda p=effects[d.name]: ladder_trends.fit_log_linear(*p), target, _log_linear)
        for d in decisions
    ]
    return pd.DataFrame(rows)


def trend_markdown(table: pd.DataFrame, top: str) -> str:
    """The table as Markdown: what each trend is and what it gives at the top rung's compute."""
    lines = [f"| kind | name | fitted on | trend | at {top}'s compute ± se |", "|---|---|---|---|---|"]
    for row in table.itertuples():
        if math.isnan(row.at_top):
            at = "—"
        else:
            value = f"{row.at_top:+.3f}" if row.kind == "effect" else f"{row.at_top:.3f}"
            at = value + ("" if math.isnan(row.se) else f" ± {row.se:.3f}")
        lines.append(f"| {row.kind} | {row.name} | {row.rungs} | {row.trend} | {at} |")
    return "\n".join(lines)
