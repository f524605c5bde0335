"""The ladder's figure: decision accuracy against the compute ratio to the top rung (DataDecide's plot; matplotlib,
Agg backend). One line per kind of decision (loss, LR sensitivity, highest LR that trains), each rung a point
with its bootstrap interval; rungs without an accuracy (missing, or the top) are left off, so a partial ladder
never draws a partial line as if it were final."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from andrea_lab.experiments.compare import ladder_trends  # noqa: E402
from andrea_lab.experiments.compare.ladder import KINDS  # noqa: E402
from andrea_lab.experiments.compare.plots import _save  # noqa: E402 (one figure writer for every report plot)


def accuracy_figure(table: pd.DataFrame):
    """The figure of :func:`andrea_lab.experiments.compare.ladder.decision_accuracy`'s table."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for kind in KINDS:
        rows = table[(table["kind"] == kind) & table["accuracy"].notna()].sort_values("compute_ratio")
        if rows.empty:
            continue
        below, above = rows["accuracy"] - rows["low"], rows["high"] - rows["accuracy"]
        ax.errorbar(rows["compute_ratio"], rows["accuracy"], yerr=[below, above], marker="o", capsize=3, label=kind)
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.set(
        xlabel="compute (6·N·D) / the top rung's", ylabel="decision accuracy", title="Ladder: agreement with the top"
    )
    ax.grid(alpha=0.3, which="both")
    if ax.lines:
        ax.legend()
    return fig


def plot_accuracy(table: pd.DataFrame, path: Path) -> Path:
    return _save(accuracy_figure(table), path)


def trends_figure(losses: dict, effects: dict, target: float):
    """Left: each variant's held-out loss per seed against compute, with its power law where it fits; right:
    each decision's effect per seed, with its line in log compute. Both drawn out to the top rung's compute."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, points, fit in (
        (left, losses, ladder_trends.fit_power_law),
        (right, effects, ladder_trends.fit_log_linear),
    ):
        for name, (compute, values) in points.items():
            if not values:
                continue
            dots = ax.plot(compute, values, "o", alpha=0.5, label=name)[0]
            try:
                fitted = fit(compute, values)
            except (ValueError, RuntimeError):  # too few rungs for this form: the points alone
                continue
            grid = np.geomspace(min(compute), max(max(compute), target), 50)
            ax.plot(grid, [fitted.predict(c).value for c in grid], "-", color=dots.get_color())
        ax.axvline(target, color="grey", linestyle=":")
        ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
    left.set(xlabel="compute (6·N·D)", ylabel="held-out loss", title="Loss against compute, per variant")
    right.axhline(0.0, color="black", linewidth=0.8)
    right.set(xlabel="compute (6·N·D)", ylabel="A − B (nats)", title="Each decision's effect against compute")
    for ax in (left, right):
        if ax.lines:
            ax.legend(fontsize=6)
    return fig


def plot_trends(losses: dict, effects: dict, target: float, path: Path) -> Path:
    return _save(trends_figure(losses, effects, target), path)
