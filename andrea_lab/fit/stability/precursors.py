"""The probe's precursor signals of an instability: what gives way before the loss does.

Wortsman et al. 2023 name two small-scale instabilities (attention-logit growth, output-logit divergence)
and the quantities that move first; Sun et al. 2024 add massive activations; the Adam-epsilon failure
(Molybog et al. 2023) shows in the second moment. Each is one registered probe metric here (the ones
that read the whole stream, the attention logits or the output already live in :mod:`.probe`):

* ``attn_logit_max_head``  the largest attention logit of each head (``block_00_h0``, ...);
* ``massive_activation``   max |stream| / median |stream| after each block;
* ``update_rms_ratio``     RMS(update) / RMS(weight) of each matrix over one optimizer step;
* ``adam_eps_share``       per group, the share of Adam's coordinates whose sqrt(v) is below its ε (there
                           the step is no longer normalised: the update of a rarely-seen coordinate jumps);
* ``weight_sigma_max`` / ``update_sigma_max``  the top singular value of each block's matrices and of their
                           update, by power iteration, on every ``spectral_every``-th probe only.

Which of them left its running band first, before a divergence or a spike, is decided in
:mod:`andrea_lab.fit.stability.bands`. Definitions: docs/stability.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn

from andrea_lab.fit.stability.probe import (
    GRADIENTS,
    LOGITS,
    STREAM,
    Values,
    _head_slices,
    _ratio,
    attn_entropy,
    block_tag,
    emit,
    log_z,
    param_groups,
    probe_metric,
    to_floats,
)
from andrea_lab.model.transformer import SUBLAYER_KINDS, Andrea, AttentionLogits, Sublayer

#: Power iterations per matrix: from a fixed start, enough for 2 significant digits where the top two singular
#: values are 10 % apart; an estimate from below where they are closer (docs/stability.md).
POWER_ITERATIONS = 20


@probe_metric("attn_logit_max_head", "attention", LOGITS, ("max attention logit per head", ".*"))
def attn_logit_max_head(s: Sublayer, logits: AttentionLogits) -> Values:
    """The largest attention logit of each head (over batch and allowed positions), after any soft cap."""
    out: Values = {}
    for heads in _head_slices(logits):
        per_head = logits(heads).amax(dim=(0, 2, 3))
        for offset, value in enumerate(per_head):
            out[f"{block_tag(s.block)}_h{heads.start + offset}"] = value
    return out


@probe_metric("massive_activation", "stream", STREAM, ("max |stream| / median |stream| per block", ".*"))
def massive_activation(s: Sublayer, before: torch.Tensor, after: torch.Tensor) -> Values:
    """The largest entry of the residual stream after each block against its median magnitude: a few
    coordinates growing thousands of times past the rest are the 'massive activations' that precede
    some divergences (Sun et al. 2024)."""
    if s.kind != SUBLAYER_KINDS[-1]:
        return {}
    magnitude = after.detach().float().abs()
    return {block_tag(s.block): _ratio(magnitude.amax(), magnitude.median())}


@dataclass(frozen=True)
class MatrixUpdate:
    """The model's matrices before and after one optimizer step, by name (``blocks_0_attn_qkv``)."""

    before: dict[str, torch.Tensor]
    after: dict[str, torch.Tensor]
    block_of: dict[str, str]  # matrix name -> block_NN / embeddings
    spectral: bool  # whether this probe also estimates singular values


def matrix_name(parameter_name: str) -> str:
    """A parameter's name as a tag key: ``blocks.0.attn.qkv.weight`` -> ``blocks_0_attn_qkv``."""
    return parameter_name.removesuffix(".weight").replace(".", "_")


@probe_metric("update_rms_ratio", "matrices", GRADIENTS, ("update RMS / weight RMS per matrix", ".*"))
def update_rms_ratio(m: MatrixUpdate) -> Values:
    """RMS(W_after − W_before) / RMS(W_before) of each matrix: the per-matrix step size (Adam keeps it near
    the LR; a matrix whose ratio jumps is where the step went wrong)."""
    return {
        name: _ratio(
            torch.linalg.vector_norm(m.after[name].float() - old.float()), torch.linalg.vector_norm(old.float())
        )
        for name, old in m.before.items()
    }


def top_singular_value(matrix: torch.Tensor, iterations: int = POWER_ITERATIONS) -> torch.Tensor:
    """The largest singular value of a 2-D ``matrix`` by power iteration on MᵀM from a fixed start (no RNG
    stream is drawn from): a lower bound that converges to σ₁ at the rate (σ₂/σ₁)^(2·iterations)."""
    m = matrix.detach().float()
    v = torch.ones(m.shape[1], device=m.device) + torch.linspace(0, 1, m.shape[1], device=m.device)
    sigma = torch.zeros((), device=m.device)
    for _ in range(iterations):
        v = v / torch.linalg.vector_norm(v).clamp_min(1e-30)
        u = m @ v
        sigma = torch.linalg.vector_norm(u)
        v = m.T @ u
    return sigma


def _block_maxima(values: dict[str, torch.Tensor], block_of: dict[str, str]) -> Values:
    out: dict[str, list[torch.Tensor]] = {}
    for name, value in values.items():
        out.setdefault(block_of[name], []).append(value)
    return {block: torch.stack(members).amax() for block, members in out.items()}


@probe_metric("weight_sigma_max", "matrices", GRADIENTS, ("top singular value of the weights per block", ".*"))
def weight_sigma_max(m: MatrixUpdate) -> Values:
    """The largest singular value over each block's matrices (sampled: every ``spectral_every``-th probe)."""
    if not m.spectral:
        return {}
    return _block_maxima({name: top_singular_value(w) for name, w in m.after.items()}, m.block_of)


@probe_metric("update_sigma_max", "matrices", GRADIENTS, ("top singular value of the update per block", ".*"))
def update_sigma_max(m: MatrixUpdate) -> Values:
    """The largest singular value of one step's update over each block's matrices (sampled like the weights')."""
    if not m.spectral:
        return {}
    deltas = {name: m.after[name].float() - old.float() for name, old in m.before.items()}
    return _block_maxima({name: top_singular_value(d) for name, d in deltas.items()}, m.block_of)


@dataclass(frozen=True)
class OptimizerState:
    """Adam-style second moments by model group: ``(exp_avg_sq, eps)`` per parameter that has one."""

    second_moments: dict[str, list[tuple[torch.Tensor, float]]]


@probe_metric("adam_eps_share", "optimizer", GRADIENTS, ("share of Adam coordinates with sqrt(v) < eps", ".*"))
def adam_eps_share(o: OptimizerState) -> Values:
    """Per group, the share of coordinates whose sqrt(v) (Adam's second moment) is below the optimizer's ε:
    their step is m/ε, not m/sqrt(v), and jumps when a gradient arrives (empty for optimizers without v)."""
    out: Values = {}
    for group, members in o.second_moments.items():
        below = sum((v.sqrt() < eps).sum() for v, eps in members)
        total = sum(v.numel() for v, _ in members)
        if total:
            out[group] = torch.as_tensor(below, dtype=torch.float32) / total
    return out


def second_moments(group_of: dict[int, str], optimizers: Iterable[Any]) -> OptimizerState:
    """Collect ``exp_avg_sq`` and ε of every parameter an optimizer keeps them for (AdamW, Muon's AdamW part;
    a combined optimizer's parts are read through its ``param_groups`` and ``state``)."""
    found: dict[str, list[tuple[torch.Tensor, float]]] = {}
    for optimizer in optimizers:
        state = getattr(optimizer, "state", {})
        for param_group in getattr(optimizer, "param_groups", []):
            eps = param_group.get("eps")
            if not isinstance(eps, (int, float)):
                continue
            for p in param_group["params"]:
                moment = state.get(p, {}).get("exp_avg_sq") if hasattr(state, "get") else None
                if isinstance(moment, torch.Tensor):
                    found.setdefault(group_of.get(id(p), "head"), []).append((moment.detach(), float(eps)))
    return OptimizerState(found)


#: The probe metrics whose values feed the running bands: the precursors of the two small-scale instabilities
#: (Wortsman et al. 2023) and of the Adam-ε and massive-activation failures (docs/stability.md). The output
#: logit max moves with log Z and is left out so that the record names log Z.
SIGNAL_METRICS = tuple(
    metric.name
    for metric in (
        attn_logit_max_head,
        attn_entropy,
        log_z,
        update_rms_ratio,
        adam_eps_share,
        massive_activation,
        weight_sigma_max,
        update_sigma_max,
    )
)
#: Signals whose band is on the value, not log|x| (bands.SignalBands): log Z is a logarithm already and may
#: change sign; Adam's ε-share is a fraction that sits at 0 for most of a run, and on log|x| its first
#: coordinate below ε (0 -> 0.001: 1e-12 -> 1e-3, twenty sds) would read as the first signal to give way.
LINEAR_SIGNALS = (log_z.name, adam_eps_share.name)
#: Spikes a run records the precursors of (the first ones; a run with hundreds of spikes is already a story).
MAX_SPIKES = 20


def is_signal(key: str) -> bool:
    """Whether a probe value (``attn_logit_max_head/block_00_h1``) is one the bands follow."""
    return key.split("/", 1)[0] in SIGNAL_METRICS


# ------------------------------------------------------------------------------------------ measuring


def matrices(model: Andrea) -> dict[str, tuple[str, nn.Parameter]]:
    """The model's matrices (2-D parameters) outside the head group, by tag key: ``blocks_0_attn_qkv`` ->
    (its group ``block_00`` or ``embeddings``, the parameter)."""
    return {
        matrix_name(name): (group, param)
        for group, members in param_groups(model).items()
        if group != "head"
        for name, param in members
        if param.dim() == 2
    }


def snapshot_matrices(model: Andrea) -> dict[str, torch.Tensor]:
    """A copy of every matrix of :func:`matrices`, taken before an optimizer step."""
    return {name: param.detach().clone() for name, (_, param) in matrices(model).items()}


def measure_matrix_updates(model: Andrea, before: dict[str, torch.Tensor], spectral: bool) -> dict[str, float]:
    """The ``matrices`` metrics of one optimizer step against :func:`snapshot_matrices` (with singular values
    only if ``spectral``)."""
    now = matrices(model)
    kept = {name: old for name, old in before.items() if name in now}
    update = MatrixUpdate(
        kept, {name: now[name][1].detach() for name in kept}, {name: now[name][0] for name in kept}, spectral
    )
    values: Values = {}
    emit(values, "matrices", update)
    return to_floats(values)


def measure_optimizer(model: Andrea, optimizers: Any) -> dict[str, float]:
    """The ``optimizer`` metrics (Adam's second moments against ε) of the optimizers training ``model``."""
    group_of = {id(p): key for key, members in param_groups(model).items() for _, p in members}
    values: Values = {}
    emit(values, "optimizer", second_moments(group_of, optimizers))
    return to_floats(values)
