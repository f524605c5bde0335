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
    Lion's own are ``model.optimizer_args.lion_betas`` (the paper's (0.9, 0.99) by default)."""

    groups: ClassVar[Mapping[str, tuple[str, ...]]] = {"lion": PARAMETER_ROLES}
    options: ClassVar[Mapping[str, Option]] = {"lion_betas": Option(float, 0.0, 1.0, high_open=True, length=2)}

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        lion_betas: tuple[float, float] = (0.9, 0.99),
    ) -> None:
        super().__init__(lr, betas, eps, weight_decay)
        self.lion_betas = tuple(lion_betas)

    def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
        lion_pytorch = require("lion_pytorch", "lion-pytorch", "lion")
        # Parameters without a gradient are left alone (a skipped step), as the contract asks.
        return lion_pytorch.Lion(groups["lion"], lr=self.lr, betas=self.lion_betas, use_triton=False)
