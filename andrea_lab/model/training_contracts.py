"""The plugin contracts of how a model is trained: an optimizer and a learning-rate schedule.

They sit beside the model's contracts (:mod:`andrea_lab.model.contracts`) because the registry and the
plugin checker, which live in this layer, check them; the built-ins that implement them are in
:mod:`andrea_lab.fit.optimizers` and :mod:`andrea_lab.fit.schedules`, registered through entry points
(``andrea_lab.optimizer``, ``andrea_lab.schedule``) exactly as a third party registers its own.

Which tensor an optimizer updates with which rule, and which tensors are decayed, is decided in one place,
:mod:`andrea_lab.model.param_groups`: it gives every parameter a *role* (``matrix``, ``embedding``,
``vector``) and a decay flag. An optimizer plugin only says which of its update rules takes which roles
(:attr:`Optimizer.groups`), and builds one ``torch.optim.Optimizer`` from the groups it is handed.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar, Iterator, Mapping, Optional

import torch

from andrea_lab.model.contracts import CONTRACT_VERSION, Contract
from andrea_lab.model.plugin_options import Option

#: The roles a parameter can play, in the order ``andrea params`` lists them (model/param_groups.py).
PARAMETER_ROLES: tuple[str, ...] = ("matrix", "embedding", "vector")


class Optimizer:
    """An optimizer plugin: builds one ``torch.optim.Optimizer`` for a model's parameter groups.

    The module constructs it as ``cls(lr=..., betas=..., eps=..., weight_decay=..., **optimizer_args)``
    (``optimizer_args`` is the YAML's ``model.optimizer_args`` block, for the plugin's own options), then
    calls :meth:`build` with ``{rule: [param group, ...]}``: for each update rule named in :attr:`groups`,
    torch-style param group dicts (``params`` and ``weight_decay``, 0 for a parameter that is not decayed).
    What the contract asks of the optimizer built:

    * one object (Lightning schedules and checkpoints one): several update rules are combined into one
      (``andrea_lab.fit.optimizers.combined``);
    * a step in which no parameter has a gradient changes nothing, neither weights nor state (this is how
      the non-finite guard skips a step for an optimizer that does not take ``found_inf``);
    * ``state_dict()``/``load_state_dict()`` round-trip exactly, so that a resumed run is bit-identical;
    * ``param_groups[*]["lr"]`` is the learning rate the schedule scales.
    """

    contract_version: ClassVar[int] = CONTRACT_VERSION
    description: ClassVar[str] = ""
    #: Which roles each update rule of this optimizer takes; every role exactly once
    #: (model/param_groups.py refuses a rule set that leaves a role out or gives one two rules).
    groups: ClassVar[Mapping[str, tuple[str, ...]]] = {"adamw": PARAMETER_ROLES}
    #: A schedule-free optimizer averages its own iterates and takes only a constant schedule (after warmup).
    needs_constant_schedule: ClassVar[bool] = False
    #: The schedule used when the YAML leaves ``model.schedule`` unset.
    default_schedule: ClassVar[str] = "warmup_cosine"
    #: Its own constructor keywords (``model.optimizer_args``), each with its type and valid range; checked
    #: before it is constructed (model/plugin_options.py). None: declares none (then it may take none).
    options: ClassVar[Optional[Mapping[str, Option]]] = None

    def __init__(self, lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay

    def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
        """One optimizer over ``groups`` (``{rule: [param group, ...]}``, the rules of :attr:`groups`).
        ``fused``: use a fused kernel where there is one (False where a ``GradScaler`` must unscale first)."""
        raise NotImplementedError  # pragma: no cover - abstract

    @contextlib.contextmanager
    def evaluation_weights(self, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        """While inside, the model's parameters hold the weights to evaluate and save; afterwards exactly the
        training weights again (bit for bit). The default: they are the same weights. A schedule-free
        optimizer, whose training iterate differs from the average it evaluates, overrides this."""
        yield


class Schedule:
    """A learning-rate schedule plugin: the multiplier of the peak learning rate at each optimizer step.

    The module constructs it as ``cls(warmup_steps=..., decay_steps=..., min_lr_ratio=..., **schedule_args)``
    (``decay_steps``: the step where the decay ends, the trainer's total by default) and hands
    :meth:`multiplier` to ``torch.optim.lr_scheduler.LambdaLR``, stepped once per optimizer step. The
    multiplier must be a pure function of the step (so a resumed run continues exactly), finite and >= 0.
    """

    contract_version: ClassVar[int] = CONTRACT_VERSION
    description: ClassVar[str] = ""
    #: Constant after its warmup: the only kind a schedule-free optimizer accepts.
    constant: ClassVar[bool] = False
    #: Its own constructor keywords (``model.schedule_args``) with type and range, as for an optimizer.
    options: ClassVar[Optional[Mapping[str, Option]]] = None

    def __init__(self, warmup_steps: int, decay_steps: int, min_lr_ratio: float) -> None:
        self.warmup_steps, self.decay_steps, self.min_lr_ratio = warmup_steps, decay_steps, min_lr_ratio

    def warmup(self, step: int) -> float | None:
        """The linear warmup's multiplier, ``(step + 1) / warmup_steps``, or None after it."""
        return (step + 1) / self.warmup_steps if step < self.warmup_steps else None

    def multiplier(self, step: int) -> float:
        raise NotImplementedError  # pragma: no cover - abstract


#: The plugin kinds of training (entry-point groups ``andrea_lab.optimizer``, ``andrea_lab.schedule``): arguments
#: of AndreaLM (``model.optimizer``, ``model.schedule``), not fields of AndreaConfig.
TRAINING_KINDS: tuple[str, ...] = ("optimizer", "schedule")

TRAINING_CONTRACTS: dict[str, Contract] = {
    "optimizer": Contract(
        Optimizer,
        ("contract_version", "groups", "needs_constant_schedule", "default_schedule", "build", "evaluation_weights"),
        "(lr=..., betas=..., eps=..., weight_decay=..., **optimizer_args)",
        (),
        (("lr", 1e-3), ("betas", (0.9, 0.95)), ("eps", 1e-8), ("weight_decay", 0.1)),
    ),
    "schedule": Contract(
        Schedule,
        ("contract_version", "constant", "multiplier"),
        "(warmup_steps=..., decay_steps=..., min_lr_ratio=..., **schedule_args)",
        (),
        (("warmup_steps", 10), ("decay_steps", 100), ("min_lr_ratio", 0.1)),
    ),
}
assert tuple(TRAINING_CONTRACTS) == TRAINING_KINDS
