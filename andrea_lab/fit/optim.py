"""AndreaLM's optimizer and learning-rate schedule, for any model: the selected optimizer and schedule plugins
(resolved once, by name, through the registry), built over the parameter groups of
:mod:`andrea_lab.model.param_groups`, with the schedule stepped once per optimizer step.

A module of its own so that a benchmark (benchmarks/throughput trains HF GPT-2 with it) or any other
training loop uses exactly what ``andrea fit`` uses, without importing the LightningModule.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import torch

from andrea_lab.fit.args import TrainingArgs
from andrea_lab.fit.optimizers.adamw import fused_adamw
from andrea_lab.fit.schedules import warmup_cosine
from andrea_lab.model.config import ConfigError
from andrea_lab.model.param_groups import assign_groups, parameter_assignment, tag_parameters
from andrea_lab.model.plugin_options import checked_options
from andrea_lab.model.registry import describe_selection, resolve
from andrea_lab.model.training_contracts import Optimizer, Schedule

__all__ = ["OptimizerChoice", "adamw_with_schedule", "clip_fused", "fused_adamw", "tag_weight_decay", "warmup_cosine"]

#: Every parameter's role and decay flag, recorded on the original shapes (model/param_groups.py).
tag_weight_decay = tag_parameters


def _construct(kind: str, name: str, cls: type, arguments: Mapping[str, Any], options: Mapping[str, Any]):
    """``cls(**arguments, **options)``; an option the plugin does not declare, or a value outside its declared
    type and range (model/plugin_options.py), is a one-line ConfigError."""
    options = checked_options(kind, name, cls, options)
    try:
        inspect.signature(cls).bind(**arguments, **options)
    except TypeError as exc:
        own = [p for p in inspect.signature(cls).parameters if p not in arguments and p not in ("self",)]
        raise ConfigError(
            f"model.{kind}_args {dict(options)!r} for {kind} {name!r}: {exc}; its options: {', '.join(own) or '(none)'}"
        ) from None
    try:
        return cls(**arguments, **options)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"model.{kind}_args {dict(options)!r} for {kind} {name!r}: {exc}") from None


@dataclass(frozen=True)
class OptimizerChoice:
    """The optimizer and schedule a run trains with: names as the YAML gives them, each plugin's own options,
    the hyperparameters every optimizer takes. Checked when built (:meth:`check`), before any run directory:
    unknown names, options a plugin does not take, a schedule the optimizer refuses."""

    optimizer: str
    schedule: Optional[str]
    optimizer_args: Mapping[str, Any]
    schedule_args: Mapping[str, Any]
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    warmup_steps: int
    min_lr_ratio: float

    @classmethod
    def of(cls, args: TrainingArgs) -> "OptimizerChoice":
        """The choice a run's checked training arguments make."""
        return cls(
            args.optimizer,
            args.schedule,
            args.optimizer_args,
            args.schedule_args,
            args.lr,
            args.betas,
            args.eps,
            args.weight_decay,
            args.warmup_steps,
            args.min_lr_ratio,
        )

    @property
    def optimizer_class(self) -> type[Optimizer]:
        return resolve("optimizer", self.optimizer)

    @property
    def schedule_name(self) -> str:
        """The schedule selected, or the optimizer's default when the YAML leaves it unset."""
        return self.schedule if self.schedule is not None else self.optimizer_class.default_schedule

    def optimizer_plugin(self) -> Optimizer:
        arguments = dict(lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)
        return _construct("optimizer", self.optimizer, self.optimizer_class, arguments, self.optimizer_args)

    def schedule_plugin(self, decay_steps: int) -> Schedule:
        cls = resolve("schedule", self.schedule_name)
        arguments = dict(warmup_steps=self.warmup_steps, decay_steps=decay_steps, min_lr_ratio=self.min_lr_ratio)
        return _construct("schedule", self.schedule_name, cls, arguments, self.schedule_args)

    def check(self, model: Optional[torch.nn.Module] = None) -> None:
        """Resolve and construct both plugins (and assign ``model``'s parameters) once, raising the first
        bad value as a one-line :class:`ConfigError`/``PluginError``."""
        optimizer = self.optimizer_class
        schedule = resolve("schedule", self.schedule_name)
        if optimizer.needs_constant_schedule and not schedule.constant:
            raise ConfigError(
                f"optimizer {self.optimizer!r} takes only a constant schedule (after warmup), got schedule "
                f"{self.schedule_name!r}; set model.schedule: constant (or leave it unset)"
            )
        self.optimizer_plugin()
        self.schedule_plugin(max(1, self.warmup_steps + 1))
        if model is not None:
            parameter_assignment(model, optimizer.groups, describe_selection("optimizer", self.optimizer))

    def build(
        self, model: torch.nn.Module, decay_steps: int, fused: bool = True
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, Optimizer]:
        """The optimizer over ``model``'s parameter groups, its per-step schedule and the optimizer plugin
        (whose :meth:`~Optimizer.evaluation_weights` the module uses around evaluation and checkpoints)."""
        plugin = self.optimizer_plugin()
        groups = assign_groups(model, plugin.groups, self.weight_decay, describe_selection("optimizer", self.optimizer))
        optimizer = plugin.build(groups, fused=fused)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self.schedule_plugin(decay_steps).multiplier)
        return optimizer, scheduler, plugin


def adamw_with_schedule(
    model: torch.nn.Module,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    warmup_steps: int,
    decay_steps: int,
    min_lr_ratio: float,
    fused: bool = True,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with weight decay on the matrices only (``dim >= 2``, unless :func:`tag_weight_decay` recorded
    otherwise), fused where torch has the kernel, and the per-step warmup + cosine schedule: the defaults
    of ``andrea fit``, for a training loop of its own (benchmarks/throughput)."""
    choice = OptimizerChoice("adamw", "warmup_cosine", {}, {}, lr, betas, eps, weight_decay, warmup_steps, min_lr_ratio)
    optimizer, scheduler, _ = choice.build(model, decay_steps, fused=fused)
    return optimizer, scheduler


def clip_fused(
    optimizer: torch.optim.Optimizer, clip_val: float, algorithm: Optional[str], norm: Optional[torch.Tensor]
) -> None:
    """Clip the gradients of a fused AdamW that no ``GradScaler`` scales (they are true gradients), by
    value, or by norm with ``norm``, the global norm already measured before clipping (no second pass over
    the gradients). A non-finite norm is left to the non-finite policy, whose skip happens on the device;
    no norm (a step without gradients) clips nothing. fp16 never gets here: with a scaler that must
    unscale before the clip, AndreaLM picks the unfused AdamW and Lightning clips."""
    grads = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(grads, clip_val, foreach=True)
    elif norm is not None:
        torch.nn.utils.clip_grads_with_norm_(grads, clip_val, norm, foreach=True)
