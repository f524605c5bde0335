"""Which parameter gets which update rule and which gets weight decay: decided here, and only here.

Every parameter gets a *role* and a decay flag when the model is built, on its original shape (under FSDP
the optimizer later sees flattened 1-D shards, on which ``p.dim()`` would decide wrongly):

* ``embedding`` -- the weights of ``nn.Embedding`` modules and of the output head (tied to the token
  embedding in ANDREA): rows looked up or scored one token at a time, which Muon's orthogonalisation does
  not suit (Jordan et al. 2024, "the usual recipe");
* ``matrix`` -- every other parameter of two or more dimensions: the hidden weight matrices;
* ``vector`` -- norms' gains and biases.

Decay goes to the parameters of two or more dimensions (matrices and embeddings), as andrea-lab always did.
An optimizer plugin declares which of its update rules takes which roles (``Optimizer.groups``);
:func:`assign_groups` refuses a declaration that leaves a role out or gives one two rules, and returns the
torch param groups. ``andrea params --optimizer`` prints the result (:func:`parameter_assignment`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from andrea_lab.model.config import ConfigError
from andrea_lab.model.training_contracts import PARAMETER_ROLES

DECAY_TAG, ROLE_TAG = "_andrea_decay", "_andrea_role"


def parameter_roles(model: nn.Module) -> dict[int, str]:
    """``{id(parameter): role}`` for every parameter of ``model`` (see the module doc)."""
    head = getattr(model, "lm_head", None)
    embedded = {
        id(p)
        for module in model.modules()
        if isinstance(module, nn.Embedding) or module is head
        for p in module.parameters()
    }
    return {
        id(p): "embedding" if id(p) in embedded else "matrix" if p.dim() >= 2 else "vector" for p in model.parameters()
    }


def tag_parameters(model: nn.Module) -> None:
    """Record each parameter's role and decay flag on the parameter itself, on its original shape."""
    roles = parameter_roles(model)
    for parameter in model.parameters():
        setattr(parameter, DECAY_TAG, parameter.dim() >= 2)
        setattr(parameter, ROLE_TAG, roles[id(parameter)])


def _role(parameter: nn.Parameter) -> str:
    return getattr(parameter, ROLE_TAG, "matrix" if parameter.dim() >= 2 else "vector")


def _decays(parameter: nn.Parameter) -> bool:
    return getattr(parameter, DECAY_TAG, parameter.dim() >= 2)


def rule_of_role(rules: Mapping[str, tuple[str, ...]], who: str) -> dict[str, str]:
    """``{role: rule}`` from an optimizer's ``groups`` declaration; a role left out or given to two rules is a
    :class:`ConfigError` naming it, the rules and the valid roles."""
    owner: dict[str, str] = {}
    for rule, roles in rules.items():
        for role in roles:
            if role not in PARAMETER_ROLES:
                raise ConfigError(
                    f"{who} gives unknown parameter role {role!r} to {rule!r}; "
                    f"valid roles: {', '.join(PARAMETER_ROLES)}"
                )
            if role in owner:
                raise ConfigError(
                    f"{who} gives parameter role {role!r} two optimizers, {owner[role]!r} and {rule!r}; "
                    f"each of {', '.join(PARAMETER_ROLES)} must go to exactly one"
                )
            owner[role] = rule
    missing = [role for role in PARAMETER_ROLES if role not in owner]
    if missing:
        raise ConfigError(
            f"{who} leaves parameter role {missing[0]!r} without an optimizer (its groups: {dict(rules)}); "
            f"each of {', '.join(PARAMETER_ROLES)} must go to exactly one"
        )
    return owner


def assign_groups(
    model: nn.Module, rules: Mapping[str, tuple[str, ...]], weight_decay: float, who: str = "the optimizer"
) -> dict[str, list[dict[str, Any]]]:
    """``{rule: [decayed group, undecayed group]}``: torch param groups, parameters in the model's order.

    Two groups per rule, decayed first, even when one is empty: with the single ``adamw`` rule these are
    exactly the two groups andrea-lab's AdamW always had, so its results and checkpoints are unchanged."""
    owner = rule_of_role(rules, who)
    groups: dict[str, list[dict[str, Any]]] = {
        rule: [{"params": [], "weight_decay": weight_decay}, {"params": [], "weight_decay": 0.0}] for rule in rules
    }
    for parameter in model.parameters():
        groups[owner[_role(parameter)]][0 if _decays(parameter) else 1]["params"].append(parameter)
    return groups


@dataclass(frozen=True)
class Assignment:
    """One parameter as the optimizer sees it: ``andrea params --optimizer`` prints one row each."""

    name: str
    shape: tuple[int, ...]
    role: str
    rule: str
    decay: bool


def parameter_assignment(model: nn.Module, rules: Mapping[str, tuple[str, ...]], who: str) -> list[Assignment]:
    """Every parameter (a tied one once) with its role, update rule and decay flag, from the same rules as
    :func:`assign_groups`."""
    owner = rule_of_role(rules, who)
    return [
        Assignment(name, tuple(p.shape), _role(p), owner[_role(p)], _decays(p)) for name, p in model.named_parameters()
    ]
