"""AdamW, andrea-lab's default, and AdamW with weight decay independent of the learning rate."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from andrea_lab.model.training_contracts import Optimizer


def fused_adamw(param_groups: list[dict], fused: bool = True, **hparams) -> torch.optim.AdamW:
    """AdamW with the fused kernel wherever torch has one (CUDA, CPU, ...), else (or with
    ``fused=False``) torch's default implementation.

    Fused is one kernel per step instead of several per parameter group (GPU) and no slower on the
    CPU (docs/performance.md); it also takes the device-side skip flag ``found_inf`` that keeps the
    non-finite check free of host syncs (andrea_lab/fit/nonfinite.py)."""
    if not fused:
        return torch.optim.AdamW(param_groups, **hparams)
    try:
        return torch.optim.AdamW(param_groups, fused=True, **hparams)
    except RuntimeError:  # a device or dtype without the fused kernel
        return torch.optim.AdamW(param_groups, **hparams)


class AdamW(Optimizer):
    """AdamW (torch's, fused where it has the kernel), decay on matrices and embeddings: the default."""

    def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
        return fused_adamw(groups["adamw"], lr=self.lr, betas=self.betas, eps=self.eps, fused=fused)


class AdamWIndependentDecay(AdamW):
    """AdamW whose weight decay does not scale with the peak learning rate (Wortsman et al. 2023).

    torch's AdamW shrinks a weight by ``lr_t · weight_decay`` per step, so changing the peak LR changes the
    decay too, and an LR sweep confounds the two. Here ``weight_decay`` is the shrink per step at the peak:
    ``lr_t / lr · weight_decay``, still following the schedule (the groups get ``weight_decay / lr``).
    Typical values are therefore about ``lr`` times smaller than AdamW's (1e-4 where AdamW has 0.1)."""

    def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
        scaled = [{**group, "weight_decay": group["weight_decay"] / self.lr} for group in groups["adamw"]]
        return fused_adamw(scaled, lr=self.lr, betas=self.betas, eps=self.eps, fused=fused)
