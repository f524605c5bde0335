"""Behaviour checks for an optimizer or schedule plugin: what ``andrea plugins --check`` runs and the test kit's
``check_optimizer``/``check_schedule`` assert (the contracts: :mod:`andrea_lab.model.training_contracts`).

An optimizer trains a micro ANDREA model a few steps over the groups of :mod:`andrea_lab.model.param_groups`,
then must (1) change nothing in a step without gradients (how the non-finite guard skips a step), (2) continue
bit for bit from its ``state_dict`` in a fresh optimizer (how a run resumes) and (3) give the training weights
back bit for bit after ``evaluation_weights``. A schedule must be a pure, finite, non-negative function of the
step, and constant after warmup if it says so. Both must declare their own options with a type and a range
(:mod:`andrea_lab.model.plugin_options`), and work at each closed end of every declared range: the values the
framework lets a YAML give them.
"""

from __future__ import annotations

import copy
import math

import torch

from andrea_lab.model.check_failed import MICRO, CheckFailed, require
from andrea_lab.model.config import preset
from andrea_lab.model.param_groups import assign_groups, rule_of_role, tag_parameters
from andrea_lab.model.plugin_options import declaration_problems, declared
from andrea_lab.model.transformer import Andrea

HYPERPARAMETERS = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def _micro_model() -> Andrea:
    torch.manual_seed(0)
    model = Andrea(preset("andrea-micro", **MICRO))
    tag_parameters(model)
    return model


def _train(model: Andrea, optimizer: torch.optim.Optimizer, steps: int, seed: int) -> float:
    generator = torch.Generator().manual_seed(seed)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        idx = torch.randint(0, MICRO["vocab_size"], (2, MICRO["block_size"]), generator=generator)
        _, loss = model(idx, idx)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def _snapshot(model: Andrea, optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], dict]:
    return [p.detach().clone() for p in model.parameters()], copy.deepcopy(optimizer.state_dict())


def _same_state(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _same_weights(a: list[torch.Tensor], b) -> bool:
    return all(torch.equal(x, y.detach()) for x, y in zip(a, b))


def _build(cls: type, model: Andrea, **options) -> tuple[object, torch.optim.Optimizer]:
    plugin = cls(**HYPERPARAMETERS, **options)
    optimizer = plugin.build(assign_groups(model, cls.groups, HYPERPARAMETERS["weight_decay"], cls.__name__))
    require(
        isinstance(optimizer, torch.optim.Optimizer), f"build returned {type(optimizer).__name__}, not an optimizer"
    )
    return plugin, optimizer


def _check_declaration(kind: str, cls: type) -> list[tuple[str, object]]:
    """Its declared options are sound (:func:`declaration_problems`); returns ``(option, value)`` at each
    closed end of each declared range."""
    problems = declaration_problems(kind, cls)
    require(not problems, "; ".join(problems))
    return [(key, edge) for key, option in (declared(kind, cls) or {}).items() for edge in option.edges()]


def _trains_at(cls: type, key: str, value: object) -> bool:
    """Whether two steps with the option ``key`` at ``value`` run and leave a finite loss (an error is a no)."""
    model = _micro_model()
    try:
        _, optimizer = _build(cls, model, **{key: value})
        return math.isfinite(_train(model, optimizer, 2, seed=3))
    except Exception:  # noqa: BLE001 - any failure of the plugin's own at a value it declared valid
        return False


def check_optimizer(cls: type) -> str:
    """Train, skip, resume and evaluate with an optimizer class on a micro model (see the module doc)."""
    edges = _check_declaration("optimizer", cls)
    rule_of_role(cls.groups, cls.__name__)
    require(isinstance(cls.needs_constant_schedule, bool), "needs_constant_schedule must be True or False")
    require(isinstance(cls.default_schedule, str), "default_schedule must be a schedule's name")
    model = _micro_model()
    plugin, optimizer = _build(cls, model)
    before = [p.detach().clone() for p in model.parameters()]
    loss = _train(model, optimizer, 3, seed=1)
    require(math.isfinite(loss), f"the loss is {loss} after 3 steps")
    require(not _same_weights(before, model.parameters()), "3 steps left every weight unchanged")

    weights, state = _snapshot(model, optimizer)
    optimizer.step()  # no parameter has a gradient: the non-finite guard's skip
    require(_same_weights(weights, model.parameters()), "a step without gradients changed the weights")
    require(_same_state(state, optimizer.state_dict()), "a step without gradients changed the optimizer's state")

    resumed_model = _micro_model()
    resumed_model.load_state_dict(model.state_dict())
    _, resumed = _build(cls, resumed_model)
    resumed.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    _train(model, optimizer, 2, seed=2)
    _train(resumed_model, resumed, 2, seed=2)
    require(
        _same_weights([p.detach() for p in model.parameters()], resumed_model.parameters()),
        "an optimizer loaded from state_dict() does not continue bit for bit (a resumed run would differ)",
    )

    weights = [p.detach().clone() for p in model.parameters()]
    with plugin.evaluation_weights(optimizer):
        pass
    require(_same_weights(weights, model.parameters()), "evaluation_weights did not give the training weights back")
    for key, value in edges:
        require(_trains_at(cls, key, value), f"with {key}={value!r} (an end of its declared range) it does not train")
    return "micro model: trains, a step without gradients changes nothing, state_dict resumes bit for bit"


def _check_multipliers(schedule: object, steps: range, warmup_steps: int, constant: bool, label: str) -> None:
    values = [schedule.multiplier(step) for step in steps]
    require(values == [schedule.multiplier(step) for step in steps], f"multiplier{label} is not a pure function")
    for step, value in zip(steps, values):
        ok = isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
        require(ok, f"multiplier({step}) = {value}{label}; it must be finite and >= 0")
    after = set(values[warmup_steps:])
    require(not constant or len(after) == 1, f"declares constant but takes {len(after)} values after warmup{label}")


def check_schedule(cls: type, warmup_steps: int = 10, decay_steps: int = 100) -> str:
    """A schedule class's multiplier over ``0 .. 1.5·decay_steps``: pure, finite, >= 0; constant after warmup
    when ``constant``; so at each closed end of its declared options' ranges too."""
    require(isinstance(cls.constant, bool), f"constant must be True or False, got {cls.constant!r}")
    steps = range(0, decay_steps + decay_steps // 2)
    schedule = cls(warmup_steps=warmup_steps, decay_steps=decay_steps, min_lr_ratio=0.1)
    _check_multipliers(schedule, steps, warmup_steps, cls.constant, "")
    for key, value in _check_declaration("schedule", cls):
        label = f" with {key}={value!r} (an end of its declared range)"
        try:
            schedule = cls(warmup_steps=warmup_steps, decay_steps=decay_steps, min_lr_ratio=0.1, **{key: value})
            _check_multipliers(schedule, steps, warmup_steps, cls.constant, label)
        except CheckFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the plugin's own at a value it declared valid
            require(False, f"{label.strip()}: {type(exc).__name__}: {exc}")
    return f"multiplier pure, finite and >= 0 over steps 0-{steps[-1]}" + (", constant after warmup" * cls.constant)
