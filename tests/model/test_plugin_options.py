"""Declared plugin options: each key of ``*_args`` declared, each value of its type and in its range (finite),
framework keys refused with where to set them; a declaration is checked against the constructor it declares."""

from __future__ import annotations

import math

import pytest

from andrea_lab.model.config import ConfigError
from andrea_lab.model.plugin_options import Option, checked_options, declaration_problems, declared
from andrea_lab.model.training_contracts import Optimizer, Schedule


class Declared(Optimizer):
    options = {
        "momentum": Option(float, 0.0, 1.0, high_open=True),
        "steps": Option(int, 1, 99),
        "nesterov": Option(bool),
        "mode": Option(str, choices=("a", "b")),
        "pair": Option(float, 0.0, 1.0, high_open=True, length=2),
    }

    def __init__(self, lr, betas, eps, weight_decay, momentum=0.9, steps=5, nesterov=True, mode="a", pair=(0.9, 0.99)):
        super().__init__(lr, betas, eps, weight_decay)


class Undeclared(Optimizer):
    def __init__(self, lr, betas, eps, weight_decay, momentum=0.9):
        super().__init__(lr, betas, eps, weight_decay)


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"momentum": math.nan},
            "model.optimizer_args.momentum = nan for optimizer 'd': must be a finite float in [0, 1)",
        ),
        ({"momentum": 1e308}, "momentum = 1e+308 for optimizer 'd': must be a finite float in [0, 1)"),
        ({"momentum": math.inf}, "momentum = inf"),
        ({"momentum": True}, "momentum = True"),
        ({"momentum": "0.9"}, "momentum = '0.9'"),
        ({"steps": -1}, "steps = -1 for optimizer 'd': must be an integer in [1, 99]"),
        ({"steps": 10**9}, "steps = 1000000000"),
        ({"steps": 5.0}, "must be an integer in [1, 99]"),
        ({"nesterov": 1}, "nesterov = 1 for optimizer 'd': must be true or false"),
        ({"mode": "c"}, "mode = 'c' for optimizer 'd': must be one of 'a', 'b'"),
        (
            {"pair": [1.5, 2]},
            "pair = [1.5, 2] for optimizer 'd': must be a list of 2 values, each a finite float in [0, 1)",
        ),
        ({"pair": [0.5]}, "a list of 2 values"),
        (
            {"momentun": 0.9},
            "model.optimizer_args has 'momentun', not an option of optimizer 'd'; its options: momentum",
        ),
        ({"lr": 0.1}, "model.optimizer_args.lr = 0.1: 'lr' is not an option of optimizer 'd' but set by model.lr"),
        ({"params": []}, "'params' is not an option of optimizer 'd' but set by the parameter groups"),
    ],
)
def test_a_bad_option_is_one_line_naming_key_value_and_what_is_valid(options, message):
    with pytest.raises(ConfigError) as info:
        checked_options("optimizer", "d", Declared, options)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_valid_options_reach_the_plugin_as_their_declared_type():
    checked = checked_options("optimizer", "d", Declared, {"momentum": 0, "steps": 99, "pair": [0, 0.5], "mode": "b"})
    assert checked == {"momentum": 0.0, "steps": 99, "pair": (0.0, 0.5), "mode": "b"}
    assert isinstance(checked["momentum"], float)


def test_a_schedule_is_refused_the_framework_s_keys_too():
    with pytest.raises(
        ConfigError, match="'warmup_steps' is not an option of schedule 's' but set by model.warmup_steps"
    ):
        checked_options("schedule", "s", Schedule, {"warmup_steps": 10**21})
    with pytest.raises(
        ConfigError, match="has 'decay_fraction', not an option of schedule 's'; its options: \\(none\\)"
    ):
        checked_options("schedule", "s", Schedule, {"decay_fraction": 0.2})


def test_an_undeclared_plugin_still_runs_with_finite_options_only():
    assert declared("optimizer", Undeclared) is None and declared("optimizer", Optimizer) == {}
    assert checked_options("optimizer", "u", Undeclared, {"momentum": 0.8}) == {"momentum": 0.8}
    with pytest.raises(ConfigError, match="momentum = nan for optimizer 'u': must be a finite number"):
        checked_options("optimizer", "u", Undeclared, {"momentum": math.nan})
    with pytest.raises(ConfigError, match="'weight_decay' is not an option of optimizer 'u'"):
        checked_options("optimizer", "u", Undeclared, {"weight_decay": 0.0})


def test_a_declaration_must_match_its_constructor_and_hold_its_defaults():
    assert declaration_problems("optimizer", Declared) == []
    assert declaration_problems("optimizer", Undeclared) == [
        "its constructor takes momentum but it declares no `options`"
    ]

    class Mismatched(Undeclared):
        options = {"beta": Option(float, 0.0, 1.0), "momentum": Option(float, 0.0, 0.5)}

    assert declaration_problems("optimizer", Mismatched) == [
        "`options` declares 'beta', which its constructor does not take",
        "option 'momentum''s default 0.9 is not a finite float in [0, 0.5]",
    ]


def test_the_edges_are_the_closed_ends_of_a_range():
    assert Option(int, 1, 99).edges() == [1, 99]
    assert Option(float, 0.0, 1.0, high_open=True).edges() == [0.0]
    assert Option(float, 0.0, 1.0, low_open=True, length=2).edges() == [(1.0, 1.0)]
    assert Option(bool).edges() == [] and Option(float).edges() == []
