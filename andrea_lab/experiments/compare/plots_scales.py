"""The figures of a suite with a scale axis, after Wortsman et al. 2023, Figure 1 (matplotlib, Agg backend).

* ``loss_vs_lr_by_scale.png`` — one panel per variant, one curve per scale: the scored loss (capped at the
  loss at init) against learning rate, mean over seeds with a min–max bar, × where a seed diverged. How the
  curve narrows and its optimum moves as the model grows is the LR sensitivity trend;
* ``attn_logit_vs_lr_by_scale.png`` — the same panels for each run's final max attention logit, log y: the
  attention-logit growth that QK-layernorm is meant to stop (not drawn when no run has the value);
* ``lr_sensitivity_by_scale.png`` — each variant's LR sensitivity (mean ± sd over seeds) against scale.

Each figure is built by a ``*_figure`` function (a :class:`matplotlib.figure.Figure`, for tests to inspect)
and saved by a ``plot_*`` one. The input is ``{scale: [compare.Variant, ...]}`` in scale order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from andrea_lab.experiments.compare.plots import _save  # noqa: E402 (one figure writer for every report plot)
from andrea_lab.experiments.compare.runs_table import ATTN_LOGIT_MAX_FINAL  # noqa: E402

ByScale = dict[str, list]  # scale -> its compare.Variant s
#: What a panel plots of one variant at one scale: a frame with index lr and one column per seed.
ByLrSeed = Callable[[object], pd.DataFrame]


def _variant_names(by_scale: ByScale) -> list[str]:
    return list(dict.fromkeys(v.name for variants in by_scale.values() for v in variants))


def _attention_logits(variant) -> pd.DataFrame:
    rows = variant.rows
    if ATTN_LOGIT_MAX_FINAL not in rows:
        return pd.DataFrame()
    return rows.pivot(index="lr", columns="seed", values=ATTN_LOGIT_MAX_FINAL).sort_index().dropna(how="all")


def _capped(variant) -> pd.DataFrame:
    return variant.capped


def _draw_scale(ax, variant, values: pd.DataFrame, color: str, label: str) -> None:
    """One scale's curve in one variant's panel: mean over seeds, min–max bar, × where a seed diverged."""
    lrs = list(values.index)
    means, lows, highs = values.mean(axis=1), values.min(axis=1), values.max(axis=1)
    ax.errorbar(lrs, means, yerr=[means - lows, highs - means], color=color, marker="o", capsize=3, label=label)
    diverged = variant.rows.groupby("lr")["diverged"].any()
    marks = [(lr, means[lr]) for lr in lrs if diverged.get(lr, False)]
    if marks:
        ax.scatter(*zip(*marks), marker="x", s=70, color=color, zorder=3)


def by_lr_figure(by_scale: ByScale, values_of: ByLrSeed, ylabel: str, title: str, log_y: bool = False):
    """One panel per variant (suite order), one curve per scale (colour by scale), LR on a log x axis."""
    names = _variant_names(by_scale)
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names) + 0.8, 3.8), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        for index, (scale, variants) in enumerate(by_scale.items()):
            variant = next((v for v in variants if v.name == name), None)
            values = None if variant is None else values_of(variant)
            if values is not None and not values.empty:
                _draw_scale(ax, variant, values, f"C{index % 10}", scale)
        ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
        ax.set(title=name, xlabel="learning rate")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(ylabel)
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=8, title="scale", title_fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def sensitivity_figure(by_scale: ByScale):
    """LR sensitivity (mean ± sd over seeds) of each variant against scale, scales in suite order."""
    scales = list(by_scale)
    fig, ax = plt.subplots(figsize=(6, 4))
    for index, name in enumerate(_variant_names(by_scale)):
        points = [
            (x, v.sensitivity.dropna()) for x, scale in enumerate(scales) for v in by_scale[scale] if v.name == name
        ]
        points = [(x, s) for x, s in points if len(s)]
        if not points:
            continue
        xs = [x for x, _ in points]
        ax.errorbar(
            xs,
            [float(s.mean()) for _, s in points],
            yerr=[float(s.std(ddof=1)) if len(s) > 1 else 0.0 for _, s in points],
            color=f"C{index % 10}",
            marker="o",
            capsize=3,
            label=name,
        )
    ax.set_xticks(range(len(scales)), scales)
    ax.set(
        title="LR sensitivity by scale (mean over the LR grid minus the best; ± sd over seeds)",
        xlabel="scale",
        ylabel="LR sensitivity (nats)",
    )
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


def has_attention_logits(by_scale: ByScale) -> bool:
    return any(not _attention_logits(v).empty for variants in by_scale.values() for v in variants)


def plot_scale_figures(by_scale: ByScale, directory: Path) -> dict[str, Path]:
    """Every figure of the module docstring that the runs have data for, by kind, written in ``directory``."""
    figures = {
        "loss_vs_lr_by_scale": by_lr_figure(
            by_scale,
            _capped,
            "loss (nats, capped at init)",
            "loss vs learning rate at each scale (x: a seed diverged; bar: lowest to highest seed)",
        ),
        "lr_sensitivity_by_scale": sensitivity_figure(by_scale),
    }
    if has_attention_logits(by_scale):
        figures["attn_logit_vs_lr_by_scale"] = by_lr_figure(
            by_scale,
            _attention_logits,
            "final max attention logit",
            "final max attention logit vs learning rate at each scale (log y)",
            log_y=True,
        )
    return {kind: _save(fig, directory / f"{kind}.png") for kind, fig in figures.items()}
