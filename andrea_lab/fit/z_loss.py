"""The auxiliary z-loss (PaLM, Chowdhery et al. 2022): ``coefficient · mean(log² Z)`` with Z = Σ exp(logits)
the softmax normaliser of each position. It pulls log Z towards 0, so the output logits cannot drift
together (the cross-entropy does not see a shift of all logits), the output-logit divergence of
Wortsman et al. 2023. ``model.z_loss`` is the coefficient (PaLM: 1e-4); AndreaLM adds the term to the loss
it optimises and logs it as ``train/z_loss``, while ``train/loss`` stays the cross-entropy.

The cross-entropy is ``log Z − logit of the target``, so both come from one ``logsumexp`` over the
vocabulary (:func:`cross_entropy_and_z_loss`): on a small model that pass over the (B, T, vocab) logits
is a large share of a step, and a second one would double it (docs/performance.md)."""

from __future__ import annotations

from typing import Optional

import torch


def log_z(logits: torch.Tensor) -> torch.Tensor:
    """log Z of every position, in float32 whatever the logits' dtype: (..., vocab) → (...)."""
    return torch.logsumexp(logits.float(), dim=-1)


def cross_entropy_and_z_loss(
    logits: torch.Tensor, targets: torch.Tensor, coefficient: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean cross-entropy of ``targets`` (B, T) under ``logits`` (B, T, vocab), and the z-loss term,
    from one logsumexp in float32 (the cross-entropy equals ``F.cross_entropy``'s to float rounding)."""
    lse = log_z(logits)  # (B, T)
    target_logits = logits.float().gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return (lse - target_logits).mean(), coefficient * lse.pow(2).mean()


def training_objective(
    model: torch.nn.Module, x: torch.Tensor, targets: torch.Tensor, coefficient: float
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """What AndreaLM optimises on a batch, as (objective, cross-entropy, z-loss term or None).

    Without a z-loss (``coefficient`` 0) the objective is the model's own cross-entropy, from its fused
    loss path; with one, the model returns only the logits and both terms come from one logsumexp
    (:func:`cross_entropy_and_z_loss`), the objective being their sum. ``model`` is an Andrea
    (``model(x, targets) -> (logits, loss)``)."""
    if not coefficient:
        _, loss = model(x, targets)
        return loss, loss, None
    logits, _ = model(x)
    loss, penalty = cross_entropy_and_z_loss(logits, targets, coefficient)
    return loss + penalty, loss, penalty
