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
    ``momentum``, ``nesterov`` and ``ns_steps`` are Muon's own (``model.optimizer_args``)."""

    groups: ClassVar[Mapping[str, tuple[str, ...]]] = {"muon": ("matrix",), "adamw": ("embedding", "vector")}
    #: ns_steps: the Newton-Schulz iterations per step (5 in the paper); torch.optim.Muon refuses 100 or more.
    options: ClassVar[Mapping[str, Option]] = {
        "momentum": Option(float, 0.0, 1.0, high_open=True),
        "nesterov": Option(bool),
        "ns_steps": Option(int, 1, 99),
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
    ) -> None:
        super().__init__(lr, betas, eps, weight_decay)
        self.momentum, self.nesterov, self.ns_steps = momentum, nesterov, ns_steps

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
        adamw = fused_adamw(groups["adamw"], fused=False, lr=self.lr, betas=self.betas, eps=self.eps)
        return CombinedOptimizer({"muon": muon, "adamw": adamw})
