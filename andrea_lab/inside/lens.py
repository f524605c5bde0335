"""What the residual stream *predicts* after each sublayer: the logit lens and direct logit attribution.

**Logit lens** (nostalgebraist 2020): the stream after a sublayer is decoded as if it were the last one,
through the model's own final norm and tied unembedding, ``lm_head(final_norm(stream))``. After the last
sublayer this *is* the model's output, so the lens ends exactly at the model's logits. A placement
without a final norm (post-norm: each sublayer's output already is a LayerNorm's) is decoded through the
unembedding alone, which is again exactly what the model itself does with its last stream.

**Direct logit attribution**: the stream leaving the last sublayer telescopes into the embedding plus one
delta per sublayer, ``x_L = e + Σ_s (after_s − before_s)``, for any placement. With the final norm's scale
frozen at its value for the full stream ``x_L`` (the standard linearisation: the norm's division by
σ(x_L) is treated as a constant), the norm is affine, so each term is mapped separately:
``contribution_s = u · (γ ⊙ centre(Δ_s) / σ(x_L))`` with ``u`` the target token's unembedding row, and the
norm's bias ``u · β`` is one more term. Centring is linear too, so it is applied to every term; the terms
then add up to the model's own logit for the token exactly (up to float rounding).

For a post-norm model the "delta" of a sublayer is the change of the stream it makes *including* the
LayerNorm after the add (that is what the stream is), not the sublayer's output alone.

**With ``final_logit_softcap``** the model outputs ``cap · tanh(z / cap)`` of the unembedding's logit
``z``. The decomposition is linear only before the cap, so what is attributed is the **pre-cap logit**
``z`` (exactly: the terms add up to it), and the capped logit and the probability the model actually
outputs are reported next to it (:class:`Attribution`). The lens needs no such care: it decodes through
:meth:`Andrea.readout`, cap included, so its probabilities are the model's own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence, Union

import torch
from torch import nn

from andrea_lab.errors import UsageError
from andrea_lab.inside.trace import tapped_forward
from andrea_lab.model.transformer import Andrea

#: The label of the stream entering the first sublayer (token + position embedding).
EMBED = "embed"
#: The label of the final norm's bias term of the attribution.
NORM_BIAS = "final norm bias"


@dataclass(frozen=True)
class Streams:
    """The residual stream of one sequence at every depth: ``states[0]`` is the embedding (the stream
    entering block 0), ``states[i + 1]`` the stream leaving sublayer ``i`` (``labels[i + 1]``, "0.attn",
    "0.mlp", ...); ``logits`` is the model's own output (T, V)."""

    labels: list[str]
    states: torch.Tensor  # (S + 1, T, C)
    logits: torch.Tensor  # (T, V)


@torch.no_grad()
def capture_streams(model: Andrea, ids: Union[Sequence[int], torch.Tensor]) -> Streams:
    """One forward pass of ``ids`` in eval mode (restored after), keeping the stream at every depth."""
    idx = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1).to(next(model.parameters()).device)
    labels, states = [EMBED], []

    def on_stream(s, before: torch.Tensor, after: torch.Tensor) -> None:
        if not states:
            states.append(before[0].float().clone())
        labels.append(f"{s.block}.{s.kind}")
        states.append(after[0].float().clone())

    logits = tapped_forward(model, idx, on_stream)
    return Streams(labels, torch.stack(states), logits[0].float())


def decode(model: Andrea, stream: torch.Tensor) -> torch.Tensor:
    """The logit lens: ``stream`` (..., C) read out as the model reads its last stream, (..., V)."""
    return model.readout(stream)


def final_norm_description(model: Andrea) -> str:
    """What the lens decodes through, in words (for the table, the JSON and the docs)."""
    cap = model.config.final_logit_softcap
    then = "" if cap is None else f", then the final soft cap {cap:g}·tanh(logit/{cap:g}) (final_logit_softcap)"
    if isinstance(model.final_norm, nn.Identity):
        return (
            "the tied unembedding alone (this placement has no final norm: the model decodes its last "
            f"stream the same way){then}"
        )
    return f"the final norm ({type(model.final_norm).__name__}) and the tied unembedding{then}"


# ------------------------------------------------------------------------------------------ the lens


@dataclass(frozen=True)
class LensRow:
    """The lens after one sublayer for the traced token: its top-k next tokens and the actual next one."""

    label: str
    top: list[tuple[int, float]]  # (token id, probability), most likely first
    next_prob: Optional[float] = None  # p(actual next token), when the text has one
    next_rank: Optional[int] = None  # its rank, 1 = the lens's top prediction

    def as_dict(self, decode_id: Callable[[int], str] = str) -> dict:
        return {
            "label": self.label,
            "top": [{"id": i, "token": decode_id(i), "prob": p} for i, p in self.top],
            "next_prob": self.next_prob,
            "next_rank": self.next_rank,
        }


def lens_rows(model: Andrea, streams: Streams, position: int, next_id: Optional[int], k: int = 5) -> list[LensRow]:
    """The lens at ``position`` after every depth (embedding first), with the actual next token's
    probability and rank when ``next_id`` is given."""
    with torch.no_grad():
        probs = torch.softmax(decode(model, streams.states[:, position]).float(), dim=-1)  # (S + 1, V)
    values, indices = probs.topk(min(k, probs.shape[-1]), dim=-1)
    rows = []
    for label, p, vals, ids in zip(streams.labels, probs, values.tolist(), indices.tolist()):
        prob = rank = None
        if next_id is not None:
            prob = float(p[next_id])
            rank = int((p > p[next_id]).sum()) + 1
        rows.append(LensRow(label, list(zip(ids, vals)), prob, rank))
    return rows


@dataclass(frozen=True)
class LensGrid:
    """The classic logit-lens picture: for every depth and every position, the lens's top-1 token."""

    labels: list[str]
    top_ids: list[list[int]]  # (S + 1, T)
    top_probs: list[list[float]]  # (S + 1, T)

    def as_dict(self) -> dict:
        return asdict(self)


def lens_grid(model: Andrea, streams: Streams) -> LensGrid:
    with torch.no_grad():
        probs = torch.softmax(decode(model, streams.states).float(), dim=-1)  # (S + 1, T, V)
    best, ids = probs.max(dim=-1)
    return LensGrid(list(streams.labels), ids.tolist(), best.tolist())


# ------------------------------------------------------------------------------------------ attribution


def frozen_final_norm(
    norm: nn.Module, stream: torch.Tensor
) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor, Optional[float]]:
    """The final norm linearised at ``stream`` (C,): ``(linear map, offset, frozen scale)`` such that
    ``norm(stream) == linear(stream) + offset``. The scale is None for a model without a final norm."""
    zero = torch.zeros_like(stream)
    if isinstance(norm, nn.Identity):
        return (lambda v: v), zero, None
    weight = getattr(norm, "weight", None)
    gamma = torch.ones_like(stream) if weight is None else weight.float()
    bias = getattr(norm, "bias", None)
    offset = zero if bias is None else bias.float()
    if isinstance(norm, nn.LayerNorm):
        scale = torch.sqrt(stream.var(unbiased=False) + norm.eps)
        return (lambda v: gamma * (v - v.mean(-1, keepdim=True)) / scale), offset, float(scale)
    if isinstance(norm, nn.RMSNorm):
        eps = torch.finfo(stream.dtype).eps if norm.eps is None else norm.eps
        scale = torch.sqrt(stream.pow(2).mean() + eps)
        return (lambda v: gamma * v / scale), offset, float(scale)
    raise UsageError(
        f"direct logit attribution knows a LayerNorm, an RMSNorm or no final norm; this model's final "
        f"norm is {type(norm).__name__}"
    )


@dataclass
class Attribution:
    """Each term's push on one token's logit; the terms add up to ``logit``: the model's own logit, or with
    a final soft cap the pre-cap logit (the cap is not linear). ``output_logit`` and ``output_prob`` are
    what the model outputs for the token (capped when ``softcap`` is set)."""

    token_id: int
    logit: float
    scale: Optional[float]
    terms: list[tuple[str, float]] = field(default_factory=list)
    softcap: Optional[float] = None
    output_logit: float = 0.0
    output_prob: float = 0.0

    @property
    def total(self) -> float:
        return sum(value for _, value in self.terms)

    @property
    def attributed(self) -> str:
        """What the terms add up to, in words (the label of the text and the JSON)."""
        if self.softcap is None:
            return "the output logit"
        return (
            f"the pre-cap logit z (final_logit_softcap {self.softcap:g}: the model outputs "
            f"{self.softcap:g}·tanh(z/{self.softcap:g}); the decomposition is linear only before the cap)"
        )

    def as_dict(self) -> dict:
        return {
            "token_id": self.token_id,
            "attributed": self.attributed,
            "logit": self.logit,
            "frozen_norm_scale": self.scale,
            "softcap": self.softcap,
            "output_logit": self.output_logit,
            "output_prob": self.output_prob,
            "terms": [{"label": label, "contribution": value} for label, value in self.terms],
            "sum": self.total,
        }


@torch.no_grad()
def attribute(model: Andrea, streams: Streams, position: int, token_id: int) -> Attribution:
    """Direct logit attribution of ``token_id``'s logit at ``position`` to the embedding, every sublayer's
    delta and the final norm's bias (module docstring); with a final soft cap, of the pre-cap logit."""
    states = streams.states[:, position]  # (S + 1, C)
    terms = torch.cat([states[:1], states[1:] - states[:-1]])  # embedding, then each sublayer's delta
    linear, offset, scale = frozen_final_norm(model.final_norm, states[-1])
    direction = model.lm_head.weight[token_id].float()
    values = linear(terms) @ direction
    cap = model.config.final_logit_softcap
    output = streams.logits[position]
    # Without a cap the model's own logit; with one, the unembedding's output before the cap (Andrea.readout
    # without its last step), the quantity the linear decomposition is of.
    logit = output[token_id] if cap is None else model.lm_head(model.final_norm(states[-1]))[token_id]
    result = Attribution(
        token_id,
        float(logit),
        scale,
        list(zip(streams.labels, values.tolist())),
        softcap=cap,
        output_logit=float(output[token_id]),
        output_prob=float(torch.softmax(output.float(), dim=-1)[token_id]),
    )
    extra = float(offset @ direction)
    head_bias = getattr(model.lm_head, "bias", None)
    if head_bias is not None:
        extra += float(head_bias[token_id])
    result.terms.append((NORM_BIAS, extra))
    return result


# ------------------------------------------------------------------------------------------ as text


def format_lens(rows: Sequence[LensRow], decode_id: Callable[[int], str], next_token: Optional[str]) -> str:
    """The lens rows as an aligned table: top-k with probabilities, and the actual next token's p and rank."""
    tops = ["  ".join(f"{decode_id(i)!r} {p:.3f}" for i, p in row.top) for row in rows]
    width = max([len("top next tokens (probability)"), *map(len, tops)])
    header = f"{'after':<8}  {'top next tokens (probability)':<{width}}"
    if next_token is not None:
        header += f"  {'p(' + repr(next_token) + ')':>14}  {'rank':>6}"
    lines = [header, "-" * len(header)]
    for row, top in zip(rows, tops):
        line = f"{row.label:<8}  {top:<{width}}"
        if row.next_prob is not None:
            line += f"  {row.next_prob:>14.4f}  {row.next_rank:>6}"
        lines.append(line)
    return "\n".join(lines)


def format_attribution(attribution: Attribution) -> str:
    """The attribution's terms, their sum and the logit they add up to; with a final soft cap that is the
    pre-cap logit, followed by the capped logit the model outputs."""
    lines = [f"{'term':<16}  {'contribution':>12}", "-" * 30]
    lines += [f"{label:<16}  {value:>+12.4f}" for label, value in attribution.terms]
    lines += ["-" * 30, f"{'sum':<16}  {attribution.total:>+12.4f}"]
    if attribution.softcap is None:
        return "\n".join([*lines, f"{'model logit':<16}  {attribution.logit:>+12.4f}"])
    lines += [
        f"{'pre-cap logit':<16}  {attribution.logit:>+12.4f}",
        f"{'capped (output)':<16}  {attribution.output_logit:>+12.4f}  "
        f"= {attribution.softcap:g}·tanh(pre-cap/{attribution.softcap:g}), not a sum of the terms",
        f"{'probability':<16}  {attribution.output_prob:>12.4f}  (the model's, through the cap)",
    ]
    return "\n".join(lines)
