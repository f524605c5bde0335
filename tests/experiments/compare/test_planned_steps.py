"""Effects in steps from separately planned runs: the shortest planned run of B reaching A's final loss,
as a bracket per seed, and a target none of B's runs reached said so."""

from __future__ import annotations

import pytest

from andrea_lab.experiments.compare.planned_steps import planned_reach, shortest_reaching

A = {1000: {0: 3.00, 1: 3.10}, 2000: {0: 2.80, 1: 2.90}}
B = {500: {0: 3.20, 1: 3.05}, 1000: {0: 2.95, 1: 2.85}, 2000: {0: 2.70, 1: 2.75}}


def test_each_seed_gets_the_shortest_reaching_budget_and_the_one_below_that_missed():
    first, second = planned_reach(A, B, 1000)
    assert (first.reached, first.missed, first.ratio) == (1000, 500, 1.0)  # 3.20 > 3.00 >= 2.95
    assert (second.reached, second.missed, second.ratio) == (500, None, 0.5)  # 3.05 <= 3.10 already
    assert "at most 1000 planned steps (more than 500; x1.00)" in first.describe()


def test_a_target_no_planned_run_reaches_is_said_so_and_has_no_ratio():
    (reach, _) = planned_reach({1000: {0: 2.0, 1: 3.5}}, B, 1000)
    assert reach.reached is None and reach.ratio is None and reach.missed == 2000
    assert "no planned run of B reached" in reach.describe()


def test_a_budget_without_the_seeds_run_is_skipped_not_counted_as_missed():
    assert shortest_reaching({500: {1: 9.0}, 1000: {0: 2.0}}, seed=0, target=2.5) == (1000, None)


def test_a_budget_a_did_not_plan_is_refused_naming_its_budgets():
    with pytest.raises(ValueError, match=r"1500 steps; its budgets: \[1000, 2000\]"):
        planned_reach(A, B, 1500)
