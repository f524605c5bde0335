"""The auxiliary z-loss (PaLM, Chowdhery et al. 2022): ``coefficient · mean(log² Z)`` with Z = Σ exp(logits)
the softmax normaliser of each position. It pulls log Z towards 0, so the output logits cannot drift
together (the cross-entropy does not see a shift of all logits), the output-logit divergence of
Wortsman et al. 2023. ``model.z_loss`` is the coefficient (PaLM: 1e-4); AndreaLM adds the term to the loss
it optimises and logs it as ``train/z_loss``, while ``train/loss`` stays the cross-entropy."""

from __future__ import annotations

import torch


def log_z(logits: torch.Tensor) -> torch.Tensor:
    """log Z of every position, in float32 whatever the logits' dtype: (..., vocab) → (...)."""
    return torch.logsumexp(logits.float(), dim=-1)


def z_loss(logits: torch.Tensor, coefficient: float) -> torch.Tensor:
    """``coefficient · mean(log² Z)`` over the positions of ``logits`` (B, T, vocab): one logsumexp."""
    return coefficient * log_z(logits).pow(2).mean()
