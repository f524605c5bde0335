"""Muon (torch.optim.Muon) on the hidden matrices, AdamW on embeddings, the head, norms and biases."""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch

from andrea_lab.fit.optimizers.adamw import fused_adamw
from andrea_lab.fit.optimizers.combined import CombinedOptimizer
from andrea_lab.model.plugin_options import Option
from andrea_lab.model.training_contracts import Optimizer


class Muon(Optimizer):
    """Muon on the hidden matrices, AdamW on embeddings, head, norms and biases (Jordan et al. 2024).

    One learning rate for both: Muon's update is rescaled to AdamW's RMS (``adjust_lr_fn="match_rms_adamw"``,
    Liu et al. 2025, "Muon is scalable"), so an AdamW learning rate and weight decay carry over.
    ``momentum``, ``nesterov`` and ``ns_steps`` are Muon's own (``model.optimizer_args``).

    ``adamw_lr_ratio`` gives the AdamW part (embeddings, head, gains) its own peak LR, ``model.lr`` times the
    ratio, on the same schedule: the RMS match makes one LR a reasonable start, not the best for both parts,
    and Muon against a tuned AdamW is only equal effort when its AdamW part is tuned too (issue 55). A ratio
    rather than an LR because a declared option needs a valid default (1: today's one LR)."""

    groups: ClassVar[Mapping[str, tuple[str, ...]]] = {"muon": ("matrix",), "adamw": ("embedding", "vector")}
    #: ns_steps: the Newton-Schulz iterations per step (5 in the paper); torch.optim.Muon refuses 100 or more.
    options: ClassVar[Mapping[str, Option]] = {
        "momentum": Option(float, 0.0, 1.0, high_open=True),
        "nesterov": Option(bool),
        "ns_steps": Option(int, 1, 99),
        "adamw_lr_ratio": Option(float, 0.0, None, low_open=True),
    }

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adamw_lr_ratio: float = 1.0,
    ) -> None:
        super().__init__(lr, betas, eps, weight_decay)
        self.momentum, self.nesterov, self.ns_steps = momentum, nesterov, ns_steps
        self.adamw_lr = lr * adamw_lr_ratio

    def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
        muon = torch.optim.Muon(
            groups["muon"],
            lr=self.lr,
            momentum=self.momentum,
            nesterov=self.nesterov,
            ns_steps=self.ns_steps,
            adjust_lr_fn="match_rms_adamw",
        )
        # Unfused: the combined optimizer cannot take found_inf (Muon has no device-side skip), so the guard
        # drops a non-finite step on the host for both parts alike.
        adamw = fused_adamw(groups["adamw"], fused=False, lr=self.adamw_lr, betas=self.betas, eps=self.eps)
        return CombinedOptimizer({"muon": muon, "adamw": adamw})
