"""The stability probe's statistics: each one function, registered here under its TensorBoard tag.

A metric reads one kind of *event* of a probe pass and returns its values by key below its tag (a block
``block_00``, a sublayer ``block_00_attn``; ``""`` for a metric with one value):

* ``stream``    ``f(sublayer, before, after)`` — the residual stream around one sublayer (:meth:`Andrea.tap`);
* ``attention`` ``f(sublayer, logits)``         — an attention sublayer's :class:`AttentionLogits`;
* ``hidden``    ``f(sublayer, hidden)``         — an MLP's activation output;
* ``output``    ``f(logits, loss)``             — the model's output on the probe batch;
* ``gradients`` ``f(gradients)``                — :class:`ProbeGradients` of the probe loss;
* ``update``    ``f(before, after)``            — a group's weights before and after an optimizer step;
* ``matrices``  ``f(matrix_update)``            — each matrix before and after a step (:mod:`.precursors`);
* ``optimizer`` ``f(optimizer_state)``          — Adam's second moments (:mod:`.precursors`).

The precursor signals of an instability are registered the same way in :mod:`.precursors` (which imports
this module; whoever lists METRICS imports it too). Adding a metric is one decorated function; the
TensorBoard custom-scalars layout and the comparison's step-0 columns (``andrea compare``) are derived from
:data:`METRICS`. Definitions of every metric: docs/stability.md.
"""

from __future__ import annotations

import math
import re
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch
from torch import nn

from andrea_lab.fit import z_loss
from andrea_lab.model.transformer import SUBLAYER_KINDS, Andrea, AttentionLogits, Sublayer
from andrea_lab.runs import tags

PREFIX = "stability"
_LOGIT_BUDGET = 1 << 26  # attention scores materialised at once by the probe (float32: 256 MiB)

# Sections of the TensorBoard custom-scalars layout the probe's charts land in.
GRADIENTS = "stability: gradients and updates (probe)"
STREAM = "stability: residual stream (probe)"
LOGITS = "stability: logits and units (probe)"

Values = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ProbeMetric:
    """One probe statistic: its tag, the event it reads, the function, and the charts that show it."""

    tag: str  # "stability/delta_ratio": keys are logged below it
    event: str  # which event of the probe pass feeds ``compute``
    compute: Callable[..., Values]
    section: str  # the custom-scalars section of its charts
    charts: tuple[tuple[str, str], ...]  # (chart title, regex of the keys it shows; "" = no key)
    beside: tuple[tuple[str, str], ...] = ()  # (chart title, another tag) charted right after its own

    @property
    def name(self) -> str:
        """The tag without the ``stability/`` prefix: how :func:`measure_probe` names its values."""
        return self.tag.split("/", 1)[1]

    def key(self, suffix: str) -> str:
        return f"{self.name}/{suffix}" if suffix else self.name

    def owns(self, tag: str) -> bool:
        """Whether ``tag`` is this metric's (``stability/grad_norm`` or ``stability/grad_norm/block_00``)."""
        return tag == self.tag or tag.startswith(self.tag + "/")

    def chart_regexes(self) -> Iterator[tuple[str, str]]:
        for title, keys in self.charts:
            yield title, f"^{re.escape(self.tag)}/{keys}$" if keys else f"^{re.escape(self.tag)}$"
        for title, tag in self.beside:
            yield title, f"^{re.escape(tag)}$"


#: Every probe metric by tag, in the order of the charts.
METRICS: dict[str, ProbeMetric] = {}


def probe_metric(
    name: str, event: str, section: str, *charts: tuple[str, str], beside: tuple[tuple[str, str], ...] = ()
):
    """Register the decorated function as the probe metric ``stability/<name>`` (see the module doc); the
    name then stands for the :class:`ProbeMetric` (``probe.grad_norm.tag``), its function is ``compute``.
    ``beside``: charts of other tags (a training curve) that belong next to this metric's."""

    def register(compute: Callable[..., Values]) -> ProbeMetric:
        tag = f"{PREFIX}/{name}"
        if tag in METRICS:
            raise ValueError(f"probe metric {tag!r} is defined twice")
        METRICS[tag] = ProbeMetric(tag, event, compute, section, charts, beside)
        return METRICS[tag]

    return register


def block_tag(i: int) -> str:
    return f"block_{i:02d}"


def sublayer_tag(s: Sublayer) -> str:
    return f"{block_tag(s.block)}_{s.kind}"


def frobenius(tensors: list[torch.Tensor]) -> torch.Tensor:
    """sqrt of the sum of squares of all entries of all tensors, in float32, on their device."""
    if not tensors:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.float()) for t in tensors]))


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    return numerator / denominator.clamp_min(1e-30)


# ------------------------------------------------------------------------------------------ the metrics


@dataclass
class ProbeGradients:
    """The gradients of the probe loss: per parameter group, and at the bottom of the residual stream."""

    model: Andrea
    idx: torch.Tensor  # the probe batch's input ids
    by_group: dict[str, list[torch.Tensor]]  # block_NN / embeddings / head → parameter gradients
    token_embedding: Optional[torch.Tensor]  # the tied token matrix's whole gradient
    at_stream_bottom: Optional[torch.Tensor]  # d loss / d (embedding output), (B, T, C)


@probe_metric("grad_norm", "gradients", GRADIENTS, ("gradient norm per block, embeddings, head", ".*"))
def grad_norm(g: ProbeGradients) -> Values:
    """Gradient norm per block; of the embeddings *through the trunk* and of the output head.

    The token embedding is tied to the output head, so its parameter gradient is mostly the head's. Its
    input share is the gradient at the bottom of the residual stream scattered back onto the rows of the
    tokens used; with the position embedding's gradient that is ``embeddings``. ``head`` is the rest of
    the tied matrix's gradient plus the final norm's (or an untied head's) parameters.
    """
    out = {key: frobenius(gs) for key, gs in g.by_group.items() if key.startswith("block_") and gs}
    if g.at_stream_bottom is None:  # no stream reached a block: the raw parameter gradients
        return out | {key: frobenius(g.by_group[key]) for key in ("embeddings", "head") if g.by_group.get(key)}
    bottom = g.at_stream_bottom.float()
    token_in = torch.zeros(g.model.token_embed.weight.shape, device=bottom.device, dtype=torch.float32)
    token_in.index_add_(0, g.idx.reshape(-1), bottom.reshape(-1, bottom.shape[-1]))
    out["embeddings"] = frobenius([token_in, bottom.sum(dim=0)])
    head = list(g.by_group.get("head", []))
    if g.token_embedding is not None and g.model.lm_head.weight is g.model.token_embed.weight:
        head.append(g.token_embedding.float() - token_in)
    if head:
        out["head"] = frobenius(head)
    return out


@probe_metric("update_ratio", "update", GRADIENTS, ("update / weight per block", ".*"))
def update_ratio(before: dict[str, list[torch.Tensor]], after: dict[str, list[torch.Tensor]]) -> Values:
    """‖weights after − before‖ / ‖before‖ of each group over one optimizer step."""
    return {
        key: _ratio(frobenius([n.float() - o.float() for n, o in zip(after[key], old)]), frobenius(old))
        for key, old in before.items()
        if len(after.get(key, ())) == len(old)
    }


@probe_metric("stream_rms", "stream", STREAM, ("stream RMS after each block", ".*"))
def stream_rms(s: Sublayer, before: torch.Tensor, after: torch.Tensor) -> Values:
    """RMS of the residual stream after each block (after its last sublayer)."""
    if s.kind != SUBLAYER_KINDS[-1]:
        return {}
    return {block_tag(s.block): after.detach().float().pow(2).mean().sqrt()}


@probe_metric(
    "delta_ratio", "stream", STREAM, ("attention delta / stream", ".*_attn"), ("MLP delta / stream", ".*_mlp")
)
def delta_ratio(s: Sublayer, before: torch.Tensor, after: torch.Tensor) -> Values:
    """‖after − before‖ / ‖before‖: how much a sublayer's wiring changes the stream."""
    x = before.detach().float()
    return {sublayer_tag(s): _ratio(torch.linalg.vector_norm(after.detach().float() - x), torch.linalg.vector_norm(x))}


def _head_slices(logits: AttentionLogits) -> list[slice]:
    """Groups of heads whose scores together stay within the probe's budget (~64M numbers at once)."""
    B, _, T, _ = logits.q.shape
    step = max(1, _LOGIT_BUDGET // (B * T * T))
    return [slice(h, h + step) for h in range(0, logits.n_head, step)]


@probe_metric("attn_logit_max", "attention", LOGITS, ("max attention logit per block", ".*"))
def attn_logit_max(s: Sublayer, logits: AttentionLogits) -> Values:
    """The largest attention logit of the block (over batch, heads, allowed positions), after any soft cap."""
    best = torch.stack([logits(heads).amax() for heads in _head_slices(logits)]).amax()
    return {block_tag(s.block): best}


@probe_metric(
    "attn_entropy",
    "attention",
    LOGITS,
    ("attention entropy per block (mean over heads)", r"block_\d+"),
    ("attention entropy per block (lowest head)", r"block_\d+_min"),
)
def attn_entropy(s: Sublayer, logits: AttentionLogits) -> Values:
    """Entropy (nats) of the attention distributions, per head averaged over batch and queries; the block's
    mean over heads and its lowest head (Zhai et al. 2023: a collapsing entropy precedes divergence).

    A query's masked future positions have probability 0 and add nothing (``entr(0) = 0``, not 0·-inf)."""
    per_head = torch.cat(
        [
            torch.special.entr(torch.softmax(logits(heads), dim=-1)).sum(-1).mean(dim=(0, 2))
            for heads in _head_slices(logits)
        ]
    )  # (nh,)
    return {block_tag(s.block): per_head.mean(), f"{block_tag(s.block)}_min": per_head.amin()}


@probe_metric("dead_fraction", "hidden", LOGITS, ("dead MLP units per block", ".*"))
def dead_fraction(s: Sublayer, hidden: torch.Tensor) -> Values:
    """Fraction of MLP hidden units that are exactly zero for every token of the probe batch."""
    alive = (hidden.detach() != 0).reshape(-1, hidden.shape[-1]).any(dim=0)
    return {block_tag(s.block): 1.0 - alive.float().mean()}


@probe_metric("logit_max", "output", LOGITS, ("output logit max and log Z", ""))
def logit_max(logits: torch.Tensor, loss: torch.Tensor) -> Values:
    return {"": logits.detach().float().amax()}


@probe_metric(
    "log_z",
    "output",
    LOGITS,
    ("output logit max and log Z", ""),
    beside=(("z-loss term (with model.z_loss > 0)", tags.TRAIN_Z_LOSS),),
)
def log_z(logits: torch.Tensor, loss: torch.Tensor) -> Values:
    """Mean over positions of log Σ exp(logits): the softmax normaliser's scale, which the z-loss acts on."""
    return {"": z_loss.log_z(logits.detach()).mean()}


@probe_metric("probe_loss", "output", LOGITS, ("probe loss and cost", ""))
def probe_loss(logits: torch.Tensor, loss: torch.Tensor) -> Values:
    return {"": loss.detach().float()}


#: Seconds one probe took (the callback measures it; shown beside the probe loss).
PROBE_SECONDS = f"{PREFIX}/probe_seconds"


def layout_entries() -> list[tuple[str, str, str]]:
    """(section, chart title, tag regex) of every probe chart, for the custom-scalars layout."""
    entries = [(m.section, title, regex) for m in METRICS.values() for title, regex in m.chart_regexes()]
    return entries + [(LOGITS, "probe loss and cost", f"^{re.escape(PROBE_SECONDS)}$")]


def attention_extremes(values: dict[str, float]) -> dict[str, Optional[float]]:
    """Of one probe's logged values (``stability/attn_logit_max/block_00``, ...): the largest attention logit of
    any block and the lowest attention entropy of any head of any block; None where there is none or one is
    not finite. What ``summary.json`` records of the last probe (``andrea compare`` reads it)."""

    def extreme(metric: ProbeMetric, suffix: str, pick: Callable) -> Optional[float]:
        found = [v for k, v in values.items() if metric.owns(k) and k.endswith(suffix)]
        return pick(found) if found and all(map(math.isfinite, found)) else None

    return {
        "attn_logit_max_final": extreme(attn_logit_max, "", max),
        "attn_entropy_min_final": extreme(attn_entropy, "_min", min),
    }


# ------------------------------------------------------------------------------------------ measuring


def emit(values: Values, event: str, *args: Any) -> None:
    for metric in METRICS.values():
        if metric.event == event:
            with torch.no_grad():
                values.update({metric.key(k): v for k, v in metric.compute(*args).items()})


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Every submodule in eval mode inside, each restored to its own previous mode after."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def param_groups(model: Andrea) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """The model's parameters by group: ``block_NN``, ``embeddings`` (token and position; the token matrix
    is tied to the head) and ``head`` (everything else: the final norm, an untied head)."""
    group_of = {id(p): "embeddings" for m in (model.token_embed, model.position_embed) for p in m.parameters()}
    group_of.update({id(p): block_tag(s.block) for s in model.sublayers() for p in s.wiring.parameters()})
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {}
    for name, param in model.named_parameters():
        groups.setdefault(group_of.get(id(param), "head"), []).append((name, param))
    return groups


def measure_updates(model: Andrea, before: dict[str, list[torch.Tensor]]) -> dict[str, float]:
    """The ``update`` metrics of ``model`` against a snapshot of its groups' weights (names as measure_probe's)."""
    after = {key: [p.detach() for _, p in members] for key, members in param_groups(model).items()}
    values: Values = {}
    emit(values, "update", before, after)
    return to_floats(values)


def to_floats(values: Values) -> dict[str, float]:
    """One host sync for all values."""
    if not values:
        return {}
    names = sorted(values)
    device = next(iter(values.values())).device
    numbers = torch.stack([torch.as_tensor(values[k]).reshape(()).float().to(device) for k in names]).cpu().tolist()
    return dict(zip(names, numbers))


def measure_probe(
    model: Andrea, x: torch.Tensor, y: Optional[torch.Tensor] = None, autocast: Any = None
) -> dict[str, float]:
    """Every probe statistic of ``model`` on the batch ``x`` (targets ``y``; None: ``x`` shifted), as
    ``{"grad_norm/block_00": ..., "stream_rms/block_00": ..., ...}`` (names without the prefix).

    Runs in eval mode (restored after), under an isolated RNG, and differentiates with
    ``torch.autograd.grad``: parameters' ``.grad`` are never touched. ``autocast`` is an optional context
    manager for the forward pass (Lightning's precision plugin's ``forward_context()``).
    """
    from lightning.pytorch.utilities.seed import isolate_rng  # lightning only when measuring (compare reads METRICS)

    if y is None:
        x, y = x[:, :-1], x[:, 1:]
    named = [(key, p) for key, members in param_groups(model).items() for _, p in members if p.requires_grad]
    values: Values = {}
    bottom: list[torch.Tensor] = []  # the stream entering the first sublayer: the embedding output

    def on_stream(s: Sublayer, before: torch.Tensor, after: torch.Tensor) -> None:
        if not bottom and before.requires_grad:
            bottom.append(before)
        emit(values, "stream", s, before, after)

    with ExitStack() as stack:
        stack.enter_context(isolate_rng())
        stack.enter_context(eval_mode(model))
        stack.enter_context(torch.enable_grad())
        stack.enter_context(
            model.tap(
                on_stream, lambda s, a: emit(values, "attention", s, a), lambda s, h: emit(values, "hidden", s, h)
            )
        )
        if autocast is not None:
            stack.enter_context(autocast)
        logits, loss = model(x, y)
        grads = torch.autograd.grad(loss, [p for _, p in named] + bottom, allow_unused=True)
    emit(values, "output", logits, loss)
    by_group: dict[str, list[torch.Tensor]] = {}
    for (key, _), g in zip(named, grads):
        if g is not None:
            by_group.setdefault(key, []).append(g)
    token = next((g for (_, p), g in zip(named, grads) if p is model.token_embed.weight), None)
    emit(values, "gradients", ProbeGradients(model, x, by_group, token, grads[len(named)] if bottom else None))
    return to_floats(values)
