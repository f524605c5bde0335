"""Coordinate descent's rule: it finds a bowl's minimum one key at a time, resumes from recorded losses,
stops at its budget, extends an edge optimum by extend_grid's rule, and refuses bad declarations in one line."""

from __future__ import annotations

import math

import pytest

from andrea_lab.experiments.sweep.search import Outcome, Step, fit_refusal, next_step, parse_search
from andrea_lab.experiments.sweep.suite_keys import SuiteError

FIT_KEYS = {"model.lr", "model.weight_decay", "model.warmup_steps"}


def declared(**changes):
    value = {
        "base": {"model.lr": 1e-3, "model.weight_decay": 0.1},
        "keys": {"model.lr": [5e-4, 1e-3, 2e-3, 4e-3], "model.weight_decay": [0.025, 0.05, 0.1, 0.2]},
        "budget": 30,
        "tuning_seeds": [0, 1],
        "judged_seeds": [100, 101, 102, 103, 104],
    }
    value.update(changes)
    return value


def bowl(point) -> float:
    """A loss with its minimum at lr 2e-3, weight decay 0.05 (inside both grids)."""
    values = dict(point)
    return math.log2(values["model.lr"] / 2e-3) ** 2 + 0.5 * math.log2(values["model.weight_decay"] / 0.05) ** 2


def shifted_lr(point) -> float:
    """Added to the bowl, moves its LR minimum to 1.6e-2: two doublings beyond the grid's highest LR."""
    lr = dict(point)["model.lr"]
    return math.log2(lr / 1.6e-2) ** 2 - math.log2(lr / 2e-3) ** 2


def run_search(search, loss=bowl):
    """Drive the search as the sweep would: run each step's points, record their losses, ask again."""
    losses, steps = {}, []
    while isinstance(step := next_step(search, losses), Step):
        steps.append(step)
        losses.update({point: loss(point) for point in step.points})
    return step, losses, steps


def test_the_descent_reaches_the_bowls_minimum_one_key_at_a_time():
    outcome, losses, steps = run_search(parse_search(declared(), "search", FIT_KEYS))
    assert dict(outcome.best) == {"model.lr": 2e-3, "model.weight_decay": 0.05}
    assert outcome.reason == "no key improves" and outcome.spent == len(losses) < 16  # not the full grid
    assert [step.label() for step in steps[:2]] == ["search round 1, model.lr", "search round 1, model.weight_decay"]


def test_a_search_resumes_from_its_recorded_losses_without_rerunning_a_point():
    search = parse_search(declared(), "search", FIT_KEYS)
    _, complete, _ = run_search(search)
    first = next_step(search, {})
    partial = {point: bowl(point) for point in first.points}
    resumed = next_step(search, partial)
    assert isinstance(resumed, Step) and not set(resumed.points) & set(partial)
    assert next_step(search, complete) == run_search(search)[0]


def test_the_budget_stops_the_search_and_is_never_exceeded():
    search = parse_search(declared(budget=5), "search", FIT_KEYS)
    outcome, losses, _ = run_search(search)
    assert isinstance(outcome, Outcome) and outcome.reason == "budget spent"
    assert len(losses) == outcome.spent == 5


def test_an_optimum_at_an_edge_gets_a_value_beyond_it_up_to_the_ceiling():
    search = parse_search(declared(), "search", FIT_KEYS, factor=2.0, max_extensions=2)
    outcome, _, _ = run_search(search, loss=lambda point: bowl(point) + shifted_lr(point))
    assert dict(outcome.best)["model.lr"] == 1.6e-2  # two doublings beyond the grid's 4e-3
    assert outcome.extended["model.lr"] == (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)


def test_without_extensions_an_edge_optimum_stays_at_the_edge():
    search = parse_search(declared(), "search", FIT_KEYS)
    outcome, _, _ = run_search(search, loss=lambda p: -dict(p)["model.lr"])
    assert dict(outcome.best)["model.lr"] == 4e-3 and outcome.extended == {}


def momentum_declared(**changes):
    momentum = {
        "base": {"model.lr": 2e-3, "model.weight_decay": 0.05, "model.momentum": 0.95},
        "keys": {**declared()["keys"], "model.momentum": [0.9, 0.95, 0.98]},
        "upper_bounds": {"model.momentum": 1.0},
    }
    return declared(**{**momentum, **changes})


@pytest.mark.parametrize(
    "best_momentum, extended", [(0.995, (0.9, 0.95, 0.98, 0.99, 0.995)), (0.55, (0.6, 0.8, 0.9, 0.95, 0.98))]
)
def test_a_key_bounded_above_is_extended_in_its_distance_to_the_bound_and_never_reaches_it(best_momentum, extended):
    keys = FIT_KEYS | {"model.momentum"}
    search = parse_search(momentum_declared(), "search", keys, factor=2.0, max_extensions=2)
    outcome, losses, _ = run_search(search, loss=lambda p: bowl(p) + abs(dict(p)["model.momentum"] - best_momentum))
    assert outcome.extended["model.momentum"] == extended  # 1 - momentum halved (0.99, 0.995) or doubled (0.8, 0.6)
    assert all(0 < dict(point)["model.momentum"] < 1 for point in losses)
    unbounded = parse_search(momentum_declared(upper_bounds=None), "search", keys, factor=2.0, max_extensions=2)
    assert max(dict(p)["model.momentum"] for p in run_search(unbounded, lambda p: -dict(p)["model.momentum"])[1]) > 1


def test_a_key_declared_in_whole_numbers_is_extended_in_whole_numbers_and_stops_at_one():
    keys = {"model.lr": [1e-3, 2e-3], "model.warmup_steps": [5, 10]}
    search = parse_search(
        declared(keys=keys, base={"model.lr": 1e-3, "model.warmup_steps": 10}), "search", FIT_KEYS, max_extensions=3
    )
    outcome, losses, _ = run_search(search, loss=lambda p: dict(p)["model.warmup_steps"] - dict(p)["model.lr"])
    assert outcome.extended["model.warmup_steps"] == (1.0, 2.0, 5.0, 10.0)  # 2.5 would be a run the fit refuses
    floats = declared(
        keys={**keys, "model.warmup_steps": [5.0, 10.0]}, base={"model.lr": 1e-3, "model.warmup_steps": 10}
    )
    as_written = run_search(
        parse_search(floats, "search", FIT_KEYS, max_extensions=3), loss=lambda p: sum(dict(p).values())
    )
    assert as_written[0].extended["model.warmup_steps"] == (0.625, 1.25, 2.5, 5.0, 10.0)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"keys": {}}, "empty search space"),
        ({"keys": {"model.lr": []}}, "non-empty list of values"),
        ({"keys": {"model.lr": [1e-3, float("inf")]}}, "finite number"),
        ({"budget": 1}, "budget 1 is not a whole number of points >= 2"),
        ({"budget": None}, "unbounded"),
        ({"keys": {"model.lrr": [1e-3]}, "base": {"model.lrr": 1e-3}}, "did you mean 'model.lr'"),
        ({"base": {"model.lr": 3e-3, "model.weight_decay": 0.1}}, "base model.lr 0.003 is not one of"),
        ({"judged_seeds": [1, 100]}, r"seeds \[1\] are both tuning and judged"),
        ({"steps": 3}, "steps"),
        ({"upper_bounds": {"model.beta2": 1.0}}, "upper_bounds names 'model.beta2', which is not tuned here"),
        ({"upper_bounds": {"model.weight_decay": 0.2}}, r"upper_bounds model.weight_decay 0.2 is not above every"),
        ({"upper_bounds": {"model.weight_decay": float("nan")}}, "upper_bounds model.weight_decay nan is not a fin"),
        ({"upper_bounds": [1.0]}, "upper_bounds .1.0. is not a mapping"),
    ],
)
def test_bad_declarations_are_one_line_naming_the_value(changes, message):
    with pytest.raises(SuiteError, match=message) as error:
        parse_search(declared(**changes), "variants.adamw.search", FIT_KEYS)
    assert "\n" not in str(error.value)


def test_a_tuned_key_the_fit_does_not_have_is_refused_by_the_fits_parser():
    good = parse_search(declared(), "search", FIT_KEYS)
    assert fit_refusal(good, ["--model.optimizer", "adamw"]) is None
    bad = parse_search(
        declared(keys={"model.nokey": [1.0, 2.0]}, base={"model.nokey": 1.0}), "search", FIT_KEYS | {"model.nokey"}
    )
    assert "model.nokey" in fit_refusal(bad, [])
