"""The pictures of ``andrea trace --plot`` beside the geometry: the logit-lens heatmap and the attribution bars.

Both use matplotlib's Agg canvas directly, so they never touch the global backend or need a display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from andrea_lab.inside.lens import Attribution, LensGrid

#: Above this many positions the heatmap's cells are too narrow to carry their token's text.
ANNOTATED_POSITIONS = 40


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Union[str, Path]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path


def _short(text: str, width: int = 6) -> str:
    shown = repr(text)[1:-1].replace(" ", "␣")  # a leading space is most of what tells BPE tokens apart
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def plot_lens_grid(
    grid: LensGrid,
    tokens: Sequence[str],
    decode: Callable[[int], str],
    path: Union[str, Path],
    next_ids: Optional[Sequence[int]] = None,
    title: str = "",
) -> Path:
    """Depth (rows, embedding at the bottom) × position (columns): each cell the lens's top-1 next token,
    coloured by its probability; a cell whose top-1 is the text's actual next token is framed."""
    depths, positions = len(grid.labels), len(tokens)
    figure = _figure(max(6.0, 0.55 * positions + 2.5), max(3.5, 0.32 * depths + 2))
    axes = figure.subplots()
    image = axes.imshow(grid.top_probs, origin="lower", aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0)
    figure.colorbar(image, ax=axes, label="p(top-1 token)")
    if positions <= ANNOTATED_POSITIONS:
        for d in range(depths):
            for t in range(positions):
                prob = grid.top_probs[d][t]
                axes.text(
                    t,
                    d,
                    _short(decode(grid.top_ids[d][t])),
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if prob > 0.6 else "black",
                )
                if next_ids is not None and t < len(next_ids) and grid.top_ids[d][t] == next_ids[t]:
                    axes.add_patch(_frame(t, d))
    axes.set_yticks(range(depths), grid.labels, fontsize=7)
    axes.set_xticks(range(positions), [_short(token) for token in tokens], rotation=90, fontsize=7)
    axes.set_xlabel("input token (the cell is the prediction for the token after it)")
    axes.set_ylabel("stream after")
    axes.set_title(title or "logit lens: top-1 next token after each sublayer")
    return _save(figure, path)


def _frame(x: float, y: float):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="tab:orange", linewidth=1.2)


def plot_attribution(attribution: Attribution, target: str, path: Union[str, Path], title: str = "") -> Path:
    """One bar per term (embedding, each sublayer's delta, the final norm's bias): its push on the target
    token's logit, with the frozen-scale linearisation named in the title."""
    labels = [label for label, _ in attribution.terms]
    values = [value for _, value in attribution.terms]
    figure = _figure(max(6.0, 0.45 * len(labels) + 3), 4.5)
    axes = figure.subplots()
    axes.bar(range(len(values)), values, color=["tab:blue" if v >= 0 else "tab:red" for v in values])
    axes.axhline(0.0, color="grey", linewidth=0.8)
    axes.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 10 else 0, fontsize=8)
    which = "logit" if attribution.softcap is None else "pre-cap logit"
    axes.set_ylabel(f"contribution to the {which} of {target!r}")
    scale = "no final norm" if attribution.scale is None else f"final-norm scale frozen at {attribution.scale:.3g}"
    gap = " "
    if attribution.softcap is not None:  # on a line of their own: the title would not fit a small model's figure
        gap, cap = "\n", attribution.softcap
        scale += f"; the model outputs {cap:g}·tanh(pre-cap/{cap:g}) = {attribution.output_logit:.3f}"
    axes.set_title(
        title
        or f"direct logit attribution: sum {attribution.total:.3f} = {which} {attribution.logit:.3f}{gap}({scale})",
        fontsize=9,
    )
    axes.grid(True, axis="y", alpha=0.3)
    return _save(figure, path)
