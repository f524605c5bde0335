"""Trends up a ladder: each variant's held-out loss against compute, each decision's effect against compute.

Why these two forms. Loss against training compute C is fitted as ``L(C) = E + A · (C / C0) ** (-alpha)``:
a power law with an irreducible term, the form of Kaplan et al. (2020) and Hoffmann et al. (2022) that the
OLMo model ladder extrapolates from its small rungs; ``C0`` (the lowest rung's compute) only keeps the fit
well-conditioned. A decision's effect (A − B) has no accepted law, and it may change sign (placements: pre =
post at 6 blocks, pre ahead at 24), so it is fitted as the least simple thing that can cross zero: a straight
line in log10 compute. Both come with their uncertainty (curve_fit's covariance; linregress's standard
errors), propagated to the prediction at the target compute, so a prediction says how sure it is.

Each point is one seed at one rung, at the LR chosen for that seed on the other seeds (the cross-fit of
:mod:`andrea_lab.experiments.compare.selection`), so the trend inherits no winner's curse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as scipy_stats

from andrea_lab.experiments.compare import stats
from andrea_lab.experiments.compare.ladder import Decision, decision_effects
from andrea_lab.experiments.compare.runs_table import SCALE


@dataclass(frozen=True)
class Prediction:
    """A value predicted at a compute, with its standard error."""

    value: float
    se: float


@dataclass(frozen=True)
class PowerLaw:
    """``E + A · (C / c0) ** (-alpha)``, the covariance of (E, A, alpha) and the (lower, upper) bounds of
    (E, A, alpha) the fit was held within."""

    e: float
    a: float
    alpha: float
    c0: float
    covariance: np.ndarray
    bounds: tuple[tuple[float, float, float], tuple[float, float, float]]

    @property
    def parameters(self) -> tuple[float, float, float]:
        """(E, A, alpha), in the order of ``covariance`` and ``bounds``."""
        return self.e, self.a, self.alpha

    def at_bound(self, index: int) -> Optional[str]:
        """Which bound, "lower" or "upper", parameter ``index`` (0 E, 1 A, 2 alpha) ended on, if any,
        within half the printed precision (scipy's bounded least squares stops just inside); else None. Such a
        parameter was held there by the bound, not pinned by the points, so its covariance is no uncertainty."""
        value = self.parameters[index]
        for side, bound in zip(("lower", "upper"), (self.bounds[0][index], self.bounds[1][index])):
            if abs(value - bound) < 5e-4:
                return side
        return None

    def __call__(self, compute: float) -> float:
        return self.e + self.a * (compute / self.c0) ** (-self.alpha)

    def predict(self, compute: float) -> Prediction:
        """The value at ``compute`` and its delta-method standard error."""
        x = compute / self.c0
        gradient = np.array([1.0, x ** (-self.alpha), -self.a * x ** (-self.alpha) * math.log(x)])
        variance = float(gradient @ self.covariance @ gradient)
        return Prediction(self(compute), math.sqrt(variance) if variance >= 0 else math.nan)


#: The steepest alpha a fit may take: steeper than any loss exponent reported (Kaplan et al. 2020: 0.05 in
#: compute; Hoffmann et al. 2022: 0.28-0.34 in parameters or tokens).
MAX_ALPHA = 3.0


def _law(x: np.ndarray, e: float, a: float, alpha: float) -> np.ndarray:
    return e + a * x ** (-alpha)


def fit_power_law(compute: Sequence[float], loss: Sequence[float]) -> PowerLaw:
    """Least-squares fit of the power law with an irreducible term (scipy.optimize.curve_fit); needs points at
    three computes at least (three parameters). Raises ValueError naming what is short."""
    compute, loss = np.asarray(compute, float), np.asarray(loss, float)
    keep = np.isfinite(compute) & np.isfinite(loss)
    compute, loss = compute[keep], loss[keep]
    if len(set(compute)) < 3:
        raise ValueError(f"a power law with an irreducible term needs 3 computes or more, got {len(set(compute))}")
    c0 = float(compute.min())
    start = (float(loss.min()) * 0.9, float(loss.max() - loss.min()) + 1e-3, 0.3)
    bounds = ((0.0, 0.0, 0.0), (float(loss.max()), math.inf, MAX_ALPHA))  # E no higher than any loss fitted
    params, covariance = optimize.curve_fit(_law, compute / c0, loss, p0=start, bounds=bounds, maxfev=20000)
    return PowerLaw(*map(float, params), c0, covariance, bounds)


@dataclass(frozen=True)
class LogLinear:
    """``intercept + slope · log10(C)`` with its standard errors and the fit's points (for the interval)."""

    slope: float
    intercept: float
    x: np.ndarray
    residual_sd: float

    def predict(self, compute: float) -> Prediction:
        """The line at ``compute`` and the standard error of that mean (not of a new seed's value)."""
        x0, n = math.log10(compute), len(self.x)
        spread = float(((self.x - self.x.mean()) ** 2).sum())
        se = self.residual_sd * math.sqrt(1 / n + (x0 - self.x.mean()) ** 2 / spread) if spread > 0 else math.nan
        return Prediction(self.intercept + self.slope * x0, se)


def fit_log_linear(compute: Sequence[float], effect: Sequence[float]) -> LogLinear:
    """A decision's effect against log10 compute (scipy.stats.linregress); needs two computes at least."""
    compute, effect = np.asarray(compute, float), np.asarray(effect, float)
    keep = np.isfinite(compute) & np.isfinite(effect)
    x, y = np.log10(compute[keep]), effect[keep]
    if len(set(x)) < 2:
        raise ValueError(f"an effect's trend needs 2 computes or more, got {len(set(x))}")
    fit = scipy_stats.linregress(x, y)
    residuals = y - (fit.intercept + fit.slope * x)
    sd = float(np.sqrt((residuals**2).sum() / (len(x) - 2))) if len(x) > 2 else math.nan
    return LogLinear(float(fit.slope), float(fit.intercept), x, sd)


def variant_points(counted: pd.DataFrame, variant: str) -> list[float]:
    """One rung's held-out losses of ``variant``, one per seed at the LR chosen on the other seeds."""
    table, choose = stats.loss_table(counted, variant), stats.choice_table(counted, variant)
    return [v for v in stats.values_at(table, stats.held_out_best_lrs(choose)).values() if math.isfinite(v)]


def ladder_points(
    runs: pd.DataFrame, rungs: Sequence[str], compute: Mapping[str, float], decisions: Sequence[Decision]
) -> tuple[dict[str, tuple[list, list]], dict[str, tuple[list, list]]]:
    """Per variant and per decision (its name), the (computes, values) of every seed at every rung given."""
    runs = stats.set_aside_unscored(runs)
    variants = list(dict.fromkeys(name for d in decisions for name in (d.a, d.b)))
    losses = {v: ([], []) for v in variants}
    effects = {d.name: ([], []) for d in decisions}
    for rung in rungs:
        counted = stats.counted_runs(runs[runs[SCALE] == rung], "heldout_loss")
        for variant in variants:
            values = variant_points(counted, variant)
            losses[variant][0].extend([compute[rung]] * len(values))
            losses[variant][1].extend(values)
        for decision in decisions:
            values = [v for v in decision_effects(counted, decision)["loss"].values() if math.isfinite(v)]
            effects[decision.name][0].extend([compute[rung]] * len(values))
            effects[decision.name][1].extend(values)
    return losses, effects


def interpolated_log10_best_lr(choosing: pd.DataFrame) -> float:
    """log10 of the best LR between grid points: the vertex of the parabola in log10 LR through the best LR's
    mean loss (over seeds) and its two neighbours'. Why not the grid's best LR itself: on a grid 2x apart it
    moves in steps of a factor 2, so a line through two or three rungs' grid optima extrapolates a step as a
    trend (d64 at 1.6e-2 and d96 at 8e-3 put d256 at 4.5e-4). The vertex is kept within the neighbours; an
    optimum at the grid's edge (or a curve that is not convex there) gives the grid's best LR unchanged."""
    means = choosing.mean(axis=1, skipna=True).dropna().sort_index()
    best = stats.best_lr(choosing)
    logs, values = np.log10(means.index.to_numpy(dtype=float)), means.to_numpy(dtype=float)
    i = int(means.index.get_loc(best))
    if i == 0 or i == len(logs) - 1:
        return math.log10(best)
    x, y = logs[i - 1 : i + 2], values[i - 1 : i + 2]
    curvature, slope, _ = np.polyfit(x, y, 2)
    if curvature <= 0:
        return math.log10(best)
    return float(np.clip(-slope / (2 * curvature), x[0], x[2]))


def best_lr_points(
    runs: pd.DataFrame, rungs: Sequence[str], compute: Mapping[str, float], variants: Sequence[str]
) -> dict[str, tuple[list, list]]:
    """Per variant, (computes, log10 best LR) with one point per rung: the optimum of the mean choosing loss
    over seeds (the selection documents), interpolated between grid points (:func:`interpolated_log10_best_lr`).
    Why a trend of the LR too: the top rung is the costly one and runs a narrow bracket per variant, which
    is only a bracket if it sits around where the lower rungs say the optimum is going (Wortsman et al.
    2023: the best LR drifts with width)."""
    runs = stats.set_aside_unscored(runs)
    points = {v: ([], []) for v in variants}
    for rung in rungs:
        counted = stats.counted_runs(runs[runs[SCALE] == rung], "heldout_loss")
        for variant in variants:
            table = stats.choice_table(counted, variant)
            if table.empty or table.isna().all().all():
                continue
            points[variant][0].append(compute[rung])
            points[variant][1].append(interpolated_log10_best_lr(table))
    return points
