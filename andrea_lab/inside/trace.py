"""Follow one token's residual stream through every sublayer of an ANDREA model.

For the token at one position of a text, and for each sublayer (block 0 attention, block 0 MLP, block 1
attention, ...), :func:`trace_token` records

* ``stream_norm`` — ‖x‖, the norm of the residual stream entering the sublayer's wiring (its input);
* ``delta_norm``  — ‖Δ‖ with Δ = output − input of the wiring: for pre-norm exactly the sublayer's
  output that is added to the stream, for other wirings (post-norm) the change of the stream;
* ``cosine``      — cos(Δ, x): near 0, the sublayer writes something new; near −1, it cancels the stream;
* ``ratio``       — ‖Δ‖ / ‖x‖.

Read through :meth:`andrea_lab.model.transformer.Andrea.tap` (the stream before and after each sublayer's wiring),
so it works for any placement plugin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import torch

from andrea_lab.model.transformer import Andrea, Sublayer


@dataclass(frozen=True)
class TraceRow:
    """One sublayer's effect on the traced token's stream."""

    block: int
    sublayer: str
    stream_norm: float
    delta_norm: float
    cosine: float

    @property
    def ratio(self) -> float:
        return self.delta_norm / self.stream_norm if self.stream_norm > 0 else float("inf")

    @property
    def label(self) -> str:
        return f"{self.block}.{self.sublayer}"

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


@dataclass
class TokenTrace:
    """The trace of the token at ``position`` (non-negative) of a sequence of ``length`` tokens."""

    position: int
    length: int
    token_id: int
    rows: list[TraceRow] = field(default_factory=list)
    final_stream_norm: float = 0.0
    next_token_id: int = 0
    next_token_prob: float = 0.0

    def as_dict(self) -> dict:
        return {
            "position": self.position,
            "length": self.length,
            "token_id": self.token_id,
            "rows": [row.as_dict() for row in self.rows],
            "final_stream_norm": self.final_stream_norm,
            "next_token_id": self.next_token_id,
            "next_token_prob": self.next_token_prob,
        }


def resolve_position(position: int, length: int) -> int:
    """A Python-style index (negative counts from the end) as a position in ``[0, length)``."""
    if length <= 0:
        raise ValueError("the text encodes to no tokens; give a non-empty --text")
    resolved = position + length if position < 0 else position
    if not 0 <= resolved < length:
        raise ValueError(
            f"position {position} is outside the text's {length} tokens (valid: {-length} .. {length - 1})"
        )
    return resolved


@torch.no_grad()
def tapped_forward(model: Andrea, idx: torch.Tensor, on_stream) -> torch.Tensor:
    """The model's logits for ``idx`` in eval mode, ``on_stream`` called at every sublayer (``Andrea.tap``);
    the model's train/eval mode is restored afterwards. The one forward pass trace and lens read."""
    was_training = model.training
    model.eval()
    try:
        with model.tap(on_stream):
            logits, _ = model(idx)
    finally:
        model.train(was_training)
    return logits


def trace_token(model: Andrea, ids: Union[Sequence[int], torch.Tensor], position: int = -1) -> TokenTrace:
    """Run ``model`` (an :class:`andrea_lab.model.transformer.Andrea`) on ``ids`` and trace the token at ``position``.

    The model is put in eval mode for the pass and returned to its previous mode afterwards.
    """
    idx = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    length = idx.shape[1]
    pos = resolve_position(position, length)
    block_size = model.config.block_size
    if length > block_size:
        raise ValueError(
            f"the text is {length} tokens, longer than the model's context "
            f"(block_size {block_size}); shorten it to at most {block_size} tokens"
        )
    device = next(model.parameters()).device
    idx = idx.to(device)

    captured: list[tuple[Sublayer, torch.Tensor, torch.Tensor]] = []

    def on_stream(s: Sublayer, before: torch.Tensor, after: torch.Tensor) -> None:
        captured.append((s, before[0, pos].float().clone(), after[0, pos].float().clone()))

    logits = tapped_forward(model, idx, on_stream)
    rows = []
    for s, x, y in captured:
        delta = y - x
        x_norm, d_norm = torch.linalg.vector_norm(x), torch.linalg.vector_norm(delta)
        cosine = torch.dot(delta, x) / (x_norm * d_norm).clamp_min(1e-30)
        rows.append(TraceRow(s.block, s.kind, float(x_norm), float(d_norm), float(cosine)))
    probs = torch.softmax(logits[0, pos].float(), dim=-1)
    best = int(probs.argmax())
    stream = captured[-1][2] if captured else None  # the stream leaving the last block
    return TokenTrace(
        position=pos,
        length=length,
        token_id=int(idx[0, pos]),
        rows=rows,
        final_stream_norm=0.0 if stream is None else float(torch.linalg.vector_norm(stream)),
        next_token_id=best,
        next_token_prob=float(probs[best]),
    )


def format_table(trace: TokenTrace) -> str:
    """The trace as an aligned text table, one row per sublayer."""
    header = (
        f"{'block':>5}  {'sublayer':<8}  {'|stream|':>10}  {'|delta|':>10}  {'|delta|/|stream|':>16}  "
        f"{'cos(delta,stream)':>17}"
    )
    lines = [header, "-" * len(header)]
    for row in trace.rows:
        lines.append(
            f"{row.block:>5}  {row.sublayer:<8}  {row.stream_norm:>10.4g}  {row.delta_norm:>10.4g}  "
            f"{row.ratio:>16.4g}  {row.cosine:>17.3f}"
        )
    lines.append(f"{'':>5}  {'out':<8}  {trace.final_stream_norm:>10.4g}")
    return "\n".join(lines)


def plot_trace(trace: TokenTrace, path: Union[str, Path], title: Optional[str] = None) -> Path:
    """Save a two-panel figure: the norms (log scale) and the cosine, across the sublayers.

    Uses matplotlib's Agg canvas directly, so it never touches the global backend or needs a display.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = [row.label for row in trace.rows]
    xs = list(range(len(labels)))
    figure = Figure(figsize=(max(6.0, 0.5 * len(labels) + 3), 6), layout="constrained")
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True)
    top.plot(xs, [r.stream_norm for r in trace.rows], marker="o", label="‖stream‖ before the sublayer")
    top.plot(xs, [r.delta_norm for r in trace.rows], marker="s", label="‖delta‖ written by the sublayer")
    top.set_yscale("log")
    top.set_ylabel("norm")
    top.grid(True, which="both", alpha=0.3)
    top.legend(loc="best")
    bottom.axhline(0.0, color="grey", linewidth=0.8)
    bottom.plot(xs, [r.cosine for r in trace.rows], marker="o", color="tab:green")
    bottom.set_ylim(-1.05, 1.05)
    bottom.set_ylabel("cos(delta, stream)")
    bottom.set_xticks(xs, labels, rotation=45 if len(labels) > 12 else 0)
    bottom.set_xlabel("block.sublayer")
    bottom.grid(True, alpha=0.3)
    top.set_title(title or f"token at position {trace.position} of {trace.length}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return path
