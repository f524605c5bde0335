"""The optimizer cost benchmark at toy size: every registered optimizer measured against AdamW in one run, its
state counted, an optimizer whose package is missing skipped with the reason (no timing is asserted)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from andrea_lab.model.registry import registered_names
from benchmarks import optimizer_cost

TOY = ["--widths", "16", "--layers", "1", "--batch", "1", "--warmup", "1", "--rounds", "2"]


def test_toy_run_measures_every_optimizer_against_adamw(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert optimizer_cost.main([*TOY, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = {row["optimizer"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(registered_names("optimizer")) >= {"adamw", "muon", "lion", "schedule_free"}
    for name, row in rows.items():
        assert "skipped" not in row and name in printed
        for kind in ("step", "train"):
            assert math.isfinite(row[f"{kind}_ratio"]) and row[f"{kind}_ratio"] > 0 and row[f"{kind}_ms"] > 0
        assert row["state_bytes"] > 0 and row["d_model"] == 16
    assert rows["adamw"]["step_ratio"] == rows["adamw"]["train_ratio"] == 1.0
    assert rows["lion"]["state_bytes"] < rows["adamw"]["state_bytes"]  # one state tensor per weight, not two
    assert rows["muon"]["state_bytes"] > rows["lion"]["state_bytes"]  # its AdamW part (two per weight) counted too


def test_an_optimizer_whose_package_is_missing_is_skipped_with_the_reason(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lion_pytorch", None)  # import lion_pytorch now fails
    assert optimizer_cost.main([*TOY, "--optimizers", "lion,adamw"]) == 0
    printed = capsys.readouterr().out
    assert "skipped lion at d16: optimizer 'lion' needs the package 'lion-pytorch'" in printed
    assert "adamw" in printed


def test_an_unknown_optimizer_is_refused_with_the_registered_ones(capsys):
    with pytest.raises(SystemExit):
        optimizer_cost.main(["--optimizers", "adamw,lamb"])
    assert "lamb not registered; registered: adamw" in capsys.readouterr().err


def test_the_documented_command_line_is_accepted():
    text = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text(encoding="utf-8")
    commands = [part.split("`")[0] for part in text.split("python benchmarks/optimizer_cost.py")[1:]]
    assert commands, "docs/performance.md no longer shows how to run benchmarks/optimizer_cost.py"
    for command in commands:
        args = optimizer_cost.parse_args(command.split())
        assert args.optimizers[0] == "adamw" and args.widths, command
