"""The comparison's plots (matplotlib, Agg backend: no display needed).

* ``loss_curves.png`` — validation (left) and training (right) loss against step, per variant at its
  best learning rate: the mean over seeds, with a band from the lowest to the highest seed;
* ``loss_vs_lr.png`` — the scored loss (capped at the loss at init) against learning rate, per
  variant: mean over seeds with a min–max bar; a cross marks an LR where at least one seed diverged;
* ``grad_norm_init.png`` — the gradient norm of each block at step 0 (``stability/grad_norm/block_XX``),
  per variant, averaged over its runs; not drawn when no run logged those scalars;
* ``delta_ratio_init.png`` — ‖sublayer output‖/‖stream‖ of each block's attention and MLP at step 0
  (``stability/delta_ratio/block_XX_{attn,mlp}``), per variant: how close each block starts to the identity.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from andrea_lab.experiments.compare.runs_table import init_column  # noqa: E402
from andrea_lab.fit.stability import probe  # noqa: E402
from andrea_lab.runs.directory import format_lr  # noqa: E402

_BLOCK_RE = re.compile(f"^{re.escape(init_column(probe.grad_norm))}/" + r"block_(\d+)$")
_SUBLAYER_RE = re.compile(f"^{re.escape(init_column(probe.delta_ratio))}/" + r"block_(\d+)_(attn|mlp)$")


def _seed_band(curves: Sequence[list[tuple[int, float]]]) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps present in every curve, with the mean, min and max over curves (non-finite values as NaN)."""
    if not curves:
        return [], [], [], []
    maps = [dict(curve) for curve in curves]
    steps = sorted(set.intersection(*(set(m) for m in maps)))
    means, lows, highs = [], [], []
    for step in steps:
        values = [m[step] for m in maps]
        if all(math.isfinite(v) for v in values):
            means.append(sum(values) / len(values))
            lows.append(min(values))
            highs.append(max(values))
        else:
            means.append(math.nan)
            lows.append(math.nan)
            highs.append(math.nan)
    return steps, means, lows, highs


def _smooth(curve: list[tuple[int, float]], weight: float = 0.8) -> list[tuple[int, float]]:
    """Exponential moving average (TensorBoard's smoothing), restarted after a non-finite value."""
    out, last = [], None
    for step, value in curve:
        if not math.isfinite(value):
            out.append((step, value))
            last = None
            continue
        last = value if last is None else weight * last + (1 - weight) * value
        out.append((step, last))
    return out


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finish_by_block(fig, ax, path: Path, title: str, ylabel: str, legend_columns: int = 1) -> Path:
    """The common frame of the per-block plots at init: log y, integer blocks on x, legend, save."""
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=title, xlabel="block", ylabel=ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8 if legend_columns == 1 else 7, ncol=legend_columns)
    return _save(fig, path)


def plot_loss_curves(variants, path: Path) -> Path:
    fig, (ax_val, ax_train) = plt.subplots(1, 2, figsize=(12, 4.5))
    for index, v in enumerate(variants):
        runs = v.rows[v.rows["lr"] == v.best_lr]
        color = f"C{index % 10}"
        label = f"{v.name} (lr {format_lr(v.best_lr)}, {len(runs)} seed{'s' if len(runs) != 1 else ''})"
        for ax, curves in (
            (ax_val, list(runs.get("val_curve", []))),
            (ax_train, [_smooth(c) for c in runs.get("train_curve", [])]),
        ):
            steps, mean, low, high = _seed_band([c for c in curves if isinstance(c, list) and c])
            if not steps:
                continue
            ax.plot(steps, mean, color=color, label=label, marker="o" if ax is ax_val else None, markersize=3)
            if len(runs) > 1:
                ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
    ax_val.set(title="in-training validation loss at each variant's best LR", xlabel="step", ylabel="loss (nats)")
    ax_train.set(title="training loss (EMA 0.8) at each variant's best LR", xlabel="step", ylabel="loss (nats)")
    for ax in (ax_val, ax_train):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle("mean over seeds; band: lowest to highest seed")
    return _save(fig, path)


def plot_loss_vs_lr(variants, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    inits = []
    for index, v in enumerate(variants):
        color = f"C{index % 10}"
        lrs = list(v.capped.index)
        means, lows, highs = (v.capped.mean(axis=1), v.capped.min(axis=1), v.capped.max(axis=1))
        ax.errorbar(lrs, means, yerr=[means - lows, highs - means], color=color, marker="o", capsize=3, label=v.name)
        diverged = v.rows.groupby("lr")["diverged"].any()
        marks = [(lr, means[lr]) for lr in lrs if diverged.get(lr, False)]
        if marks:
            ax.scatter(*zip(*marks), marker="x", s=80, color=color, zorder=3)
        inits += [x for x in v.rows["initial_val_loss"] if x == x]
    if inits:
        ax.axhline(sum(inits) / len(inits), color="grey", linestyle="--", linewidth=1, label="loss at init")
    ax.set_xscale("log")
    ax.set(
        title="loss vs learning rate (x: a seed diverged; capped at the loss at init)",
        xlabel="learning rate",
        ylabel="loss (nats)",
    )
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _by_block(rows, pattern: "re.Pattern[str]", part: Optional[str] = None) -> dict[int, float]:
    """Mean over runs of the step-0 columns ``init/...`` whose rest matches ``pattern``, by block index."""
    found = {}
    for column in rows.columns:
        match = pattern.match(column)
        if match and (part is None or match.group(2) == part):
            values = rows[column].dropna()
            if len(values):
                found[int(match.group(1))] = float(values.mean())
    return dict(sorted(found.items()))


def plot_init_grad_norms(variants, path: Path) -> Optional[Path]:
    """Gradient norm by block at initialisation; None (nothing written) when no run logged it."""
    series = [(i, v, _by_block(v.rows, _BLOCK_RE)) for i, v in enumerate(variants)]
    series = [(i, v, by_block) for i, v, by_block in series if by_block]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, v, by_block in series:
        color = f"C{index % 10}"
        ax.plot(list(by_block), list(by_block.values()), marker="o", color=color, label=v.name)
        embeddings = v.rows.get(init_column(probe.grad_norm, "embeddings"))
        if embeddings is not None and embeddings.notna().any():
            ax.scatter([-1], [float(embeddings.mean())], marker="s", color=color)
    return _finish_by_block(
        fig, ax, path, "gradient norm by block at step 0 (square at -1: embeddings)", "gradient norm"
    )


def plot_init_delta_ratios(variants, path: Path) -> Optional[Path]:
    """Sublayer delta / stream by block at initialisation, attention solid and MLP dashed; None when
    no run logged it."""
    series = [
        (i, v, {part: _by_block(v.rows, _SUBLAYER_RE, part) for part in ("attn", "mlp")})
        for i, v in enumerate(variants)
    ]
    series = [item for item in series if any(item[2].values())]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, v, parts in series:
        for part, style in (("attn", "-"), ("mlp", "--")):
            if parts[part]:
                ax.plot(
                    list(parts[part]),
                    list(parts[part].values()),
                    style,
                    marker="o",
                    color=f"C{index % 10}",
                    label=f"{v.name} {part}",
                )
    ax.axhline(1.0, color="grey", lw=0.8)
    return _finish_by_block(
        fig,
        ax,
        path,
        "‖output − input‖ / ‖input‖ of each sublayer at step 0 (below 1: near the identity)",
        "delta / stream",
        legend_columns=2,
    )


def plot_precursors(variants, path: Path) -> Optional[Path]:
    """The two Wortsman et al. signals against the step, one column per LR: the largest attention logit of any
    block (log scale) and the output log Z, mean over seeds per variant (band: lowest to highest seed). None
    when no run has the probe's curves."""
    lrs = sorted({float(lr) for v in variants for lr in v.rows["lr"]})
    if not lrs or not any(
        isinstance(c, list) and c for v in variants for c in v.rows.get("attn_logit_curve", pd.Series(dtype=object))
    ):
        return None
    fig, axes = plt.subplots(2, len(lrs), figsize=(3.6 * len(lrs), 6.5), squeeze=False)
    for column, lr in enumerate(lrs):
        for index, v in enumerate(variants):
            runs = v.rows[v.rows["lr"] == lr]
            for row, key in enumerate(("attn_logit_curve", "log_z_curve")):
                curves = [c for c in runs.get(key, []) if isinstance(c, list) and c]
                steps, mean, low, high = _seed_band(curves)
                if steps:
                    ax = axes[row][column]
                    ax.plot(steps, mean, color=f"C{index % 10}", label=v.name, linewidth=1)
                    ax.fill_between(steps, low, high, color=f"C{index % 10}", alpha=0.15, linewidth=0)
        axes[0][column].set(title=f"peak LR {format_lr(lr)}", yscale="log", ylabel="max attention logit")
        axes[1][column].set(xlabel="step", ylabel="output log Z")
        for row in (0, 1):
            axes[row][column].grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("probe batch: max attention logit and log Z\nmean over seeds; band: lowest to highest", fontsize=9)
    return _save(fig, path)
