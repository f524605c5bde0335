"""The sweep's preflight checks a variant's training arguments as AndreaLM does: a plugin option outside its
declared range fails the suite before any run starts (it parsed, and each run then failed on its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from andrea_lab.experiments.sweep.preflight import parse_command

QUICKSTART = str(Path(__file__).resolve().parents[3] / "experiments" / "quickstart.yaml")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["--model.optimizer", "muon", "--model.optimizer_args", "{ns_steps: -1}"],
            "model: model.optimizer_args.ns_steps = -1 for optimizer 'muon': must be an integer in [1, 99]",
        ),
        (["--model.schedule_args", "{warmup_steps: 5}"], "'warmup_steps' is not an option of schedule"),
        (["--model.warmup_steps", str(10**21)], "warmup_steps must be an integer in [0, 1e+12]"),
        ([], None),
    ],
)
def test_a_variants_training_arguments_are_checked_before_any_run(overrides, message):
    problem, _ = parse_command(["--config", QUICKSTART, *overrides])
    assert problem == message if message is None else message in problem
