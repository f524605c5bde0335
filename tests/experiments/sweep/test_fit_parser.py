"""A sweep's planning builds one ``andrea fit`` parser and parses each distinct command once, with the same results
as a fresh parser per command (andrea_lab.experiments.sweep.fit_parser)."""

from __future__ import annotations

from pathlib import Path

import pytest

from andrea_lab.experiments.sweep import fit_parser, speed_path
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.preflight import preflight
from andrea_lab.experiments.sweep.suite import load_suite

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = str(REPO / "experiments" / "quickstart.yaml")


@pytest.fixture
def counted(monkeypatch) -> list[fit_parser.FitParser]:
    """Every FitParser made, in order."""
    made: list[fit_parser.FitParser] = []
    real_init = fit_parser.FitParser.__init__

    def init(self) -> None:
        real_init(self)
        made.append(self)

    monkeypatch.setattr(fit_parser.FitParser, "__init__", init)
    return made


def _plan(tmp_path):
    """stability_width's 3 widths x 2 variants at one LR and seed: 6 distinct commands; on a CPU without bf16
    units the speed rule leaves every command as it is."""
    suite = load_suite(REPO / "experiments" / "suites" / "stability_width.yaml")
    return plan_sweep(suite, tmp_path, lrs=[1e-3], seeds=[500])


def _plan_and_check(specs):
    checked, _ = speed_path.for_sweep(specs, "auto")
    problems, _ = preflight(checked)
    assert problems == []
    return checked


def test_a_sweeps_planning_builds_one_parser_and_parses_each_command_once(tmp_path, monkeypatch, counted):
    monkeypatch.setattr(speed_path, "this_cpu_has_bf16_units", lambda: False)
    specs = _plan(tmp_path)
    distinct = {spec.fit_args for spec in specs}
    assert len(distinct) == 6
    with fit_parser.shared() as shared:
        _plan_and_check(specs)
    assert (shared.builds, shared.parses) == (1, len(distinct))  # the speed rule and the preflight read the same 6
    assert len(counted) == 1
    counted.clear()
    _plan_and_check(specs)  # outside a sweep: a parser of its own for every read, as before
    assert len(counted) == 2 * len(distinct) and all(p.builds == 1 and p.parses == 1 for p in counted)


def test_andrea_sweep_plans_within_one_shared_parser(tmp_path, monkeypatch, counted):
    from andrea_lab.commands import sweep

    monkeypatch.setattr(speed_path, "this_cpu_has_bf16_units", lambda: False)
    suite = REPO / "experiments" / "suites" / "stability_width.yaml"
    code = sweep.main([str(suite), "--lrs", "1e-3", "--seeds", "500", "--runs-dir", str(tmp_path), "--dry-run"])
    assert code == 0
    assert [(p.builds, p.parses) for p in counted] == [(1, 6)]


@pytest.mark.parametrize("order", [(0, 1, 2, 0), (1, 2, 1, 0)])
def test_one_parser_answers_as_a_fresh_parser_per_command(order):
    commands = [
        ["--config", QUICKSTART, "--trainer.max_steps", "7"],
        ["--config", QUICKSTART, "--trainer.max_steps", "seven"],  # does not parse: must leave nothing behind
        ["--config", QUICKSTART, "--model.config.d_model", "96", "--model.config.n_head", "3"],
    ]
    fresh = [fit_parser.FitParser().parse(command) for command in commands]
    assert fresh[1][0] is not None and "max_steps" in fresh[1][0]
    with fit_parser.shared() as shared:
        for index in order:
            assert fit_parser.parse(commands[index]) == fresh[index]
    assert shared.builds == 1 and shared.parses == len(set(order))


def test_a_caller_changing_its_config_does_not_change_the_next_answer():
    with fit_parser.shared():
        _, first = fit_parser.parse(["--config", QUICKSTART])
        first.trainer.max_steps = -5
        _, second = fit_parser.parse(["--config", QUICKSTART])
    assert second.trainer.max_steps != -5
