"""The ladder's figure: decision accuracy against the compute ratio to the top rung (DataDecide's plot; matplotlib,
Agg backend). One line per kind of decision (loss, LR sensitivity, highest LR that trains), each rung a point
with its bootstrap interval; rungs without an accuracy (missing, or the top) are left off, so a partial ladder
never draws a partial line as if it were final."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

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
