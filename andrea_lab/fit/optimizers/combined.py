"""Several torch optimizers as one: Muon on the hidden matrices and AdamW on the rest, in one object.

Lightning's automatic optimisation steps, clips, schedules and checkpoints *one* optimizer, so an optimizer
plugin with several update rules returns them combined. ``param_groups`` is the list of the parts' own group
dicts (the same objects, read anew each time), so the LR schedule scales every part and gradient clipping
sees every parameter;
``state_dict()`` holds each part's under its rule's name, so a resumed run continues each part exactly.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from typing import Any, Mapping

import torch


class PartsState(MutableMapping):
    """The parts' ``state`` tables as one, each parameter's entry read from and written to the part that
    owns it. (A ``ChainMap`` would not do: reading a parameter of the second part through it indexes the
    first part's ``defaultdict`` first, which silently adds an empty entry there, and that part's
    ``state_dict()`` then fails on a parameter it does not have. Lightning reads and writes every entry
    this way when it moves the optimizer between devices.)"""

    def __init__(self, parts: Mapping[str, torch.optim.Optimizer]) -> None:
        self._parts = list(parts.values())

    def _owner(self, parameter: Any) -> torch.optim.Optimizer:
        for part in self._parts:
            if parameter in part.state:
                return part
        for part in self._parts:
            if any(parameter is p for group in part.param_groups for p in group["params"]):
                return part
        raise KeyError(parameter)

    def __getitem__(self, parameter: Any) -> Any:
        return self._owner(parameter).state[parameter]  # a defaultdict, in the part that owns it

    def __setitem__(self, parameter: Any, value: Any) -> None:
        self._owner(parameter).state[parameter] = value

    def __delitem__(self, parameter: Any) -> None:
        del self._owner(parameter).state[parameter]

    def __iter__(self) -> Iterator[Any]:
        for part in self._parts:
            yield from part.state

    def __len__(self) -> int:
        return sum(len(part.state) for part in self._parts)


class CombinedOptimizer(torch.optim.Optimizer):
    """The optimizers ``parts`` (``{rule: optimizer}``, disjoint parameters) stepped together."""

    def __init__(self, parts: Mapping[str, torch.optim.Optimizer]) -> None:
        # Not torch.optim.Optimizer.__init__: it would own param_groups and state, which here are the parts'.
        self.parts = dict(parts)
        self.defaults: dict[str, Any] = {}
        for hooks in (
            "_optimizer_step_pre_hooks",
            "_optimizer_step_post_hooks",
            "_optimizer_state_dict_pre_hooks",
            "_optimizer_state_dict_post_hooks",
            "_optimizer_load_state_dict_pre_hooks",
            "_optimizer_load_state_dict_post_hooks",
        ):
            setattr(self, hooks, OrderedDict())

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The parts' own group dicts, read anew each time: a part's ``load_state_dict`` replaces its group
        dicts, and a list taken once would keep the old ones, which the LR schedule would then scale while
        the parts step with the LR they were loaded with (a resumed run's schedule stood still)."""
        return [group for part in self.parts.values() for group in part.param_groups]

    @property
    def state(self) -> PartsState:  # type: ignore[override]
        return PartsState(self.parts)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self.parts.values():
            part.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts.values():
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        return {rule: part.state_dict() for rule, part in self.parts.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:  # type: ignore[override]
        if set(state_dict) != set(self.parts):
            raise ValueError(
                f"optimizer state for the parts {sorted(state_dict)}, but this optimizer has {sorted(self.parts)}; "
                "a run resumes only with the optimizer it was trained with"
            )
        for rule, part in self.parts.items():
            part.load_state_dict(state_dict[rule])

    def __repr__(self) -> str:
        return "CombinedOptimizer(" + ", ".join(f"{rule}={type(p).__name__}" for rule, p in self.parts.items()) + ")"
