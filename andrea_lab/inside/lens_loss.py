"""The logit lens's loss on held-out text, after every block: how far each depth gets toward the output.

For every window of the held-out evaluation (the same windows, the same document units and the same
cluster-robust standard error as :mod:`andrea_lab.data.heldout`), the stream after the embedding and
after each block is decoded through the final norm and the tied unembedding
(:func:`andrea_lab.inside.lens.decode`) and scored with cross-entropy against the next token. After the
last block this is the model's own held-out loss.

The record is ``lens.json`` beside the run's ``summary.json`` (:func:`lens_record`); ``andrea compare``
reads :data:`BLOCKS_TO_FINAL` from it (:func:`lens_columns`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from andrea_lab.data.heldout import HeldOutDataset, clustered_mean
from andrea_lab.data.progress import Progress
from andrea_lab.files import read_json
from andrea_lab.inside.lens import EMBED, decode
from andrea_lab.model.transformer import SUBLAYER_KINDS, Andrea
from andrea_lab.runs.directory import finite_or_none

#: The sibling of ``summary.json`` that holds the per-block held-out loss.
LENS_FILE = "lens.json"
LENS_SCHEMA = 1
#: "Close to the final loss": within this many nats per token.
TOLERANCE = 0.1
#: The runs-frame column ``andrea compare`` aggregates: blocks needed to come within TOLERANCE of the final loss.
BLOCKS_TO_FINAL = "lens_blocks_to_final"


def lens_losses(model: Andrea, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy (n_layer + 1, B, T) of the lens after the embedding and after each block."""
    losses: list[torch.Tensor] = []

    def score(stream: torch.Tensor) -> None:
        logits = decode(model, stream).float()
        losses.append(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape))

    def on_stream(s, before: torch.Tensor, after: torch.Tensor) -> None:
        if not losses:
            score(before)
        if s.kind == SUBLAYER_KINDS[-1]:
            score(after)

    with model.tap(on_stream):
        model(x)
    return torch.stack(losses)


@dataclass(frozen=True)
class LayerLoss:
    """The lens's held-out loss after one depth (``embed``, ``block 0`` ...) and its SE over documents."""

    layer: str
    loss: Optional[float]
    se: Optional[float]
    #: SE of (this depth's loss − the final loss), paired by document: the same tokens are scored at every
    #: depth, so the gap is known far better than either loss (whose SE mostly says how documents differ).
    se_vs_final: Optional[float] = None


@torch.no_grad()
def heldout_lens(
    model: Andrea, dataset: HeldOutDataset, batch_size: int = 16, say: Optional[Callable[[str], None]] = None
) -> tuple[list[LayerLoss], dict]:
    """Every depth's lens loss over the held-out windows of ``dataset``, and what was scored (tokens,
    documents, windows, the sample's seed), in eval mode (restored after). ``say`` gets a progress line
    every 10 s (minutes on a big split): none when it is None."""
    plan = dataset.plan
    device = next(model.parameters()).device
    depths = model.config.n_layer + 1
    sums = torch.zeros(depths, plan.unit_count, dtype=torch.float64, device=device)
    counts = torch.zeros(plan.unit_count, dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    progress = None
    if say is not None:
        progress = Progress(math.ceil(len(dataset) / batch_size), f"lens over {len(dataset)} held-out windows", say=say)
    try:
        for batch, first in enumerate(range(0, len(dataset), batch_size), start=1):
            x, y, units = (
                torch.stack(parts).to(device)
                for parts in zip(*(dataset[i] for i in range(first, min(first + batch_size, len(dataset)))))
            )
            losses = lens_losses(model, x, y).double().flatten(1)  # (depths, B·T)
            sums.index_add_(1, units.flatten(), losses)
            counts.index_add_(0, units.flatten(), torch.ones_like(losses[0]))
            if progress is not None:
                progress.step(batch)
    finally:
        model.train(was_training)
    labels = [EMBED] + [f"block {i}" for i in range(depths - 1)]
    layers, per_unit, tokens = [], sums.cpu().numpy(), counts.cpu().numpy()
    for label, row in zip(labels, per_unit):
        loss, se = clustered_mean(row, tokens)
        _, gap_se = clustered_mean(row - per_unit[-1], tokens)
        layers.append(LayerLoss(label, finite_or_none(loss), finite_or_none(se), finite_or_none(gap_se)))
    scored = {
        "tokens": int(counts.sum().item()),
        "documents": int((counts > 0).sum().item()),
        "windows": len(dataset),
        "split_tokens": plan.split_tokens,
        "sampled": plan.sampled,
        "se_unit": plan.se_unit,
        "seed": plan.seed,
    }
    return layers, scored


def blocks_to_final(layers: list[LayerLoss], tolerance: float = TOLERANCE) -> Optional[int]:
    """How many blocks the stream passes before the lens's loss first comes within ``tolerance`` nats of
    the final loss (0: the embedding already does; n_layer: only the last block)."""
    final = layers[-1].loss
    if final is None:
        return None
    return next(i for i, layer in enumerate(layers) if layer.loss is not None and layer.loss <= final + tolerance)


def lens_record(layers: list[LayerLoss], scored: dict, checkpoint: str, step: int, decoded: str) -> dict[str, Any]:
    """``lens.json``: the per-depth losses, what was scored, and the depth that gets close to the final loss."""
    return {
        "schema": LENS_SCHEMA,
        "checkpoint": checkpoint,
        "step": step,
        "decoded_through": decoded,
        "layers": [asdict(layer) for layer in layers],
        "tolerance": TOLERANCE,
        BLOCKS_TO_FINAL: blocks_to_final(layers),
        "heldout": scored,
    }


def lens_columns(run_dir: str | Path) -> dict[str, Any]:
    """The runs-frame columns from a run's ``lens.json`` (none when it has none)."""
    record = read_json(Path(run_dir) / LENS_FILE)
    return {} if record is None else {BLOCKS_TO_FINAL: record.get(BLOCKS_TO_FINAL)}


def format_layers(layers: list[LayerLoss]) -> str:
    """The per-depth losses as an aligned table (also the TensorBoard text, in Markdown)."""
    final = layers[-1].loss
    lines = ["| after | lens loss | SE | − final | SE (paired) |", "|---|---|---|---|---|"]
    for layer in layers:
        loss, se, gap_se = (_number(value, "{:.4f}") for value in (layer.loss, layer.se, layer.se_vs_final))
        gap = _number(None if layer.loss is None or final is None else layer.loss - final, "{:+.4f}")
        lines.append(f"| {layer.layer} | {loss} | {se} | {gap} | {gap_se} |")
    return "\n".join(lines)


def _number(value: Optional[float], spec: str) -> str:
    return "n/a" if value is None else spec.format(value)


def plot_layers(layers: list[LayerLoss], path: str | Path, title: str) -> Path:
    """The per-depth loss with ±2 SE error bars (matplotlib's Agg canvas, no global backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(max(6.5, 0.6 * len(layers) + 2), 4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    xs = list(range(len(layers)))
    axes.errorbar(
        xs,
        [float("nan") if one.loss is None else one.loss for one in layers],
        yerr=[0.0 if one.se is None else 2 * one.se for one in layers],
        marker="o",
        capsize=3,
    )
    axes.set_xticks(xs, [one.layer for one in layers], rotation=45 if len(layers) > 8 else 0)
    axes.set_ylabel("held-out cross-entropy of the lens (nats/token)")
    axes.set_xlabel("stream after")
    axes.grid(True, alpha=0.3)
    axes.set_title(title, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path
