"""Lion (Chen et al. 2023, "Symbolic discovery of optimization algorithms"), from ``lion-pytorch``."""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch

from andrea_lab.fit.optimizers.extras import require
from andrea_lab.model.plugin_options import Option
from andrea_lab.model.training_contracts import PARAMETER_ROLES, Optimizer


class Lion(Optimizer):
    """Lion (lion-pytorch): the sign of an interpolated momentum; one state tensor per weight instead of two.

    Its update has a unit RMS, so it wants a learning rate about 3-10x below AdamW's and a weight decay as
    many times larger (the paper's advice: give it its own LR grid in a suite). ``model.betas`` are AdamW's;
    Lion's own are ``model.optimizer_args.lion_betas`` (the paper's (0.9, 0.99) by default).

    lion-pytorch shrinks a weight by ``lr_t · weight_decay`` per step, so at Lion's 3-10x smaller LR the same
    ``weight_decay`` decays 3-10x less than under AdamW, and an LR sweep moves the decay with it. With
    ``independent_decay: true`` ``weight_decay`` is the shrink per step at the peak (``lr_t / lr ·
    weight_decay``, the groups get ``weight_decay / lr``), as in AdamWIndependentDecay: the two can then be
    tuned one at a time (issue 55)."""

    groups: ClassVar[Mapping[str, tuple[str, ...]]] = {"lion": PARAMETER_ROLES}
    options: ClassVar[Mapping[str, Option]] = {
        "lion_betas": Option(float, 0.0, 1.0, high_open=True, length=2),
        "independent_decay": Option(bool),
    }

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        lion_betas: tuple[float, float] = (0.9, 0.99),
        independent_decay: bool = False,
    ) -> None:
        super().__init__(lr, betas, eps, weight_decay)
        self.lion_betas = tuple(lion_betas)
        self.independent_decay = independent_decay

    def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
        lion_pytorch = require("lion_pytorch", "lion-pytorch", "lion")
        # Parameters without a gradient are left alone (a skipped step), as the contract asks.
        param_groups = groups["lion"]
        if self.independent_decay:
            param_groups = [{**group, "weight_decay": group["weight_decay"] / self.lr} for group in param_groups]
        return lion_pytorch.Lion(param_groups, lr=self.lr, betas=self.lion_betas, use_triton=False)
