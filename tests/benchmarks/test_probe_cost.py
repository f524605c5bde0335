"""The probe cost benchmark at toy size: every part timed against a training step in one run, the spectral
part amortised over its sampling (no timing is asserted)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import probe_cost

TOY = ["--widths", "16", "--layers", "1", "--batch", "2", "--block", "16", "--warmup", "1", "--rounds", "2"]


def test_toy_run_times_every_part_against_a_training_step(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert probe_cost.main([*TOY, "--interval", "5", "--spectral-every", "2", "--json", str(out)]) == 0
    rows = {row["part"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(probe_cost.PARTS)
    assert rows["train_step"]["ratio_to_step"] == 1.0 and rows["train_step"]["added_per_step"] == 0.0
    for name, row in rows.items():
        assert math.isfinite(row["ms"]) and row["ms"] > 0, name
    assert rows["probe"]["every_steps"] == 5 and rows["matrix_updates_spectral"]["every_steps"] == 10
    assert rows["probe"]["added_per_step"] == pytest.approx(rows["probe"]["ratio_to_step"] / 5)
    assert "all probes on" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--widths", "a,b"], ["--interval", "0"], ["--widths", "0"]])
def test_bad_arguments_are_one_line_errors(bad, capsys):
    with pytest.raises(SystemExit) as stopped:
        probe_cost.main(bad)
    assert stopped.value.code == 2 and "error:" in capsys.readouterr().err
