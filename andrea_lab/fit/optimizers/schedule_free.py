"""Schedule-free AdamW (Defazio et al. 2024), from the ``schedulefree`` package.

It trains at one iterate and evaluates another (an average), switched by ``optimizer.train()`` and
``optimizer.eval()``. :meth:`ScheduleFreeAdamW.evaluation_weights` is that switch for AndreaLM: around
validation and when a checkpoint is saved, and back to the training weights *bit for bit* (the weights are
restored from a copy, not interpolated back), so evaluating or checkpointing never changes the training run
and a resumed run is identical to an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, ClassVar, Iterator, Mapping

import torch

from andrea_lab.fit.optimizers.extras import require
from andrea_lab.model.plugin_options import Option
from andrea_lab.model.training_contracts import PARAMETER_ROLES, Optimizer


@functools.cache
def skipping_schedule_free() -> type:
    """``schedulefree.AdamWScheduleFree`` whose step without any gradient is no step at all: the original
    advances its averaging counters even then, and the non-finite guard drops a step by clearing gradients."""
    schedulefree = require("schedulefree", "schedulefree", "schedule_free")

    class SkippingAdamWScheduleFree(schedulefree.AdamWScheduleFree):
        @torch.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            if any(p.grad is not None for group in self.param_groups for p in group["params"]):
                super().step()
            return loss

    return SkippingAdamWScheduleFree


class ScheduleFreeAdamW(Optimizer):
    """Schedule-free AdamW (schedulefree): no decay schedule, evaluates an average of its iterates.

    Takes a constant schedule only (its warmup is the schedule's ``warmup_steps``); validation and
    checkpoints see the averaged weights. ``model.optimizer_args``: ``r`` and ``weight_lr_power``, the
    package's averaging options."""

    groups: ClassVar[Mapping[str, tuple[str, ...]]] = {"schedule_free_adamw": PARAMETER_ROLES}
    needs_constant_schedule: ClassVar[bool] = True
    default_schedule: ClassVar[str] = "constant"
    #: The package's averaging powers: r weights later iterates more (0: uniform), weight_lr_power the LR's
    #: share in the weights (2 its default); larger values overflow the averaging weights in float32.
    options: ClassVar[Mapping[str, Option]] = {
        "r": Option(float, 0.0, 10.0),
        "weight_lr_power": Option(float, 0.0, 10.0),
    }

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        r: float = 0.0,
        weight_lr_power: float = 2.0,
    ) -> None:
        super().__init__(lr, betas, eps, weight_decay)
        self.r, self.weight_lr_power = r, weight_lr_power

    def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
        optimizer = skipping_schedule_free()(
            groups["schedule_free_adamw"],
            lr=self.lr,
            betas=self.betas,
            eps=self.eps,
            r=self.r,
            weight_lr_power=self.weight_lr_power,
        )
        optimizer.train()  # the package starts in eval mode and refuses to step there
        return optimizer

    @contextlib.contextmanager
    def evaluation_weights(self, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        if not all(group.get("train_mode", False) for group in optimizer.param_groups):
            yield  # already evaluating (a checkpoint saved during validation)
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        training = [p.detach().clone() for p in params]
        optimizer.eval()
        try:
            yield
        finally:
            with torch.no_grad():
                for p, saved in zip(params, training):
                    p.copy_(saved)
            for group in optimizer.param_groups:
                group["train_mode"] = True  # what optimizer.train() sets, without its inexact interpolation back
