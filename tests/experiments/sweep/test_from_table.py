"""andrea sweep --from-table extends a committed suite's grids without rerunning it, with a stand-in executor
whose "fits" are a known function of the LR (test_grid_extension's): the planned runs come from the table, one
witness a scale is rerun and must reproduce its row to the bit, and only the added LRs run; a witness that
differs stops it before any LR is added; a suite it cannot extend and a table of another suite are refused in
one line. Then andrea compare --from-table judges the table and the new runs as one suite, and refuses a merge
whose rerun differs from its row or whose new runs have no witness."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_grid_extension import StandInFits, added_lrs, loss

from andrea_lab.commands import compare as compare_command
from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.compare.runs_table import load_runs, read_runs_csv, write_runs_csv
from andrea_lab.experiments.sweep.grid_extension import RECORD

GRID = [1.0e-3, 2.0e-3, 4.0e-3]


def write_suite(directory: Path, extend: bool, name: str = "ext") -> Path:
    (directory / "base.yaml").write_text("model: {}\n")
    document = {
        "name": name,
        "base": "base.yaml",
        "lrs": GRID,
        "seeds": [0, 1, 2],
        "variants": [{"name": "rising"}, {"name": "bracketed"}],
    }
    if extend:
        document["extend_grid"] = {"max_extensions": 3, "factor": 2}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def sweep(suite_file: Path, runs: Path, fits: StandInFits, monkeypatch, *extra: str) -> int:
    monkeypatch.setattr(sweep_command, "make_executor", lambda *args, **kwargs: fits)
    return sweep_command.main([str(suite_file), "--runs-dir", str(runs), "--no-check", *extra])


@pytest.fixture
def committed(tmp_path, monkeypatch) -> Path:
    """The suite as it was committed: run without extend_grid (rising's optimum above the grid), its table written
    as compare writes it, its runs directory gone (runs/ is not in git)."""
    suite_file = write_suite(tmp_path, extend=False)
    assert sweep(suite_file, tmp_path / "old", StandInFits(), monkeypatch) == 0
    table = tmp_path / "results" / "runs.csv"
    table.parent.mkdir()
    write_runs_csv(load_runs(tmp_path / "old" / "ext"), table)
    assert len(read_runs_csv(table)) == 18
    return table


class Drifted(StandInFits):
    """Fits on "another machine": every loss off by 1e-12, as a different kernel's rounding would make it."""

    def launch(self, run_dir, command, marker, slot):
        code = super().launch(run_dir, command, marker, slot)
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["final_val_loss"] = loss(marker["variant"], marker["lr"], marker["seed"]) + 1e-12
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return code


def test_only_the_witness_and_the_added_lrs_run_and_compare_judges_them_as_one_suite(
    tmp_path, committed, monkeypatch, capsys
):
    suite_file, fits = write_suite(tmp_path, extend=True), StandInFits()
    assert sweep(suite_file, tmp_path / "runs", fits, monkeypatch, "--from-table", str(committed)) == 0
    out = capsys.readouterr().out
    assert fits.started[0] == ("rising", 1e-3, 0), "the witness: the first planned run the table holds"
    assert added_lrs(fits, "rising") == [8e-3, 1.6e-2, 3.2e-2] and added_lrs(fits, "bracketed") == []
    assert len(fits.started) == 1 + 9, "none of the table's other 17 runs reran"
    assert "17 planned runs read from it, not rerun" in out and "1 witness run(s) reproduce it to the bit" in out
    assert "= 18 runs in" in out, "the header counts the table's runs with the ones to run"
    assert "extend_grid: rising: optimum inside its grid (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)" in out

    again = StandInFits()  # a rerun of the same command: everything is done, the added LRs planned from the record
    assert sweep(suite_file, tmp_path / "runs", again, monkeypatch, "--from-table", str(committed)) == 0
    assert again.started == []

    out_dir = tmp_path / "judged"
    alone = [str(tmp_path / "runs"), "--out", str(out_dir), "--no-tensorboard"]
    assert compare_command.main(alone) == 2, "the new runs alone are part of a grid"
    assert f"holds runs that extend the committed table {committed}" in capsys.readouterr().err
    argv = [str(tmp_path / "runs" / "ext"), "--from-table", str(committed), "--out", str(out_dir), "--suite"]
    assert compare_command.main([*argv, str(suite_file), "--no-tensorboard"]) == 0
    merged = read_runs_csv(out_dir / "runs.csv")
    assert len(merged) == 18 + 9, "the table's 18 runs (the witness once) and the 9 added"
    assert sorted(merged.loc[merged["variant"] == "rising", "lr"].unique()) == [*GRID, 8e-3, 1.6e-2, 3.2e-2]


def test_a_witness_that_does_not_reproduce_the_table_stops_it_before_any_lr_is_added(
    tmp_path, committed, monkeypatch, capsys
):
    suite_file, fits = write_suite(tmp_path, extend=True), Drifted()
    assert sweep(suite_file, tmp_path / "runs", fits, monkeypatch, "--from-table", str(committed)) == 1
    error = capsys.readouterr().err
    assert fits.started == [("rising", 1e-3, 0)], "the witness alone"
    assert "the witness rising lr=1e-3 seed=0 reran to final_val_loss" in error
    assert "rerun the whole suite (without --from-table)" in error
    assert not (tmp_path / "runs" / "ext" / RECORD).exists()

    argv = [str(tmp_path / "runs" / "ext"), "--from-table", str(committed), "--suite", str(suite_file)]
    assert compare_command.main([*argv, "--out", str(tmp_path / "judged"), "--no-tensorboard"]) == 2
    assert "the rerun rising lr=1e-3 seed=0 has final_val_loss" in capsys.readouterr().err


def test_compare_refuses_new_runs_without_a_witness(tmp_path, committed, monkeypatch, capsys):
    suite_file = write_suite(tmp_path, extend=True)
    assert sweep(suite_file, tmp_path / "runs", StandInFits(), monkeypatch, "--from-table", str(committed)) == 0
    witness = tmp_path / "runs" / "ext" / "rising" / "lr1e-3-seed0"
    witness.rename(tmp_path / "moved-away")
    argv = [str(tmp_path / "runs" / "ext"), "--from-table", str(committed), "--suite", str(suite_file)]
    assert compare_command.main([*argv, "--out", str(tmp_path / "judged"), "--no-tensorboard"]) == 2
    assert "no run here reruns one of the table's" in capsys.readouterr().err


def test_a_suite_longer_than_a_session_resumes_from_its_last_table_rerunning_only_the_witness(
    tmp_path, committed, monkeypatch, capsys
):
    """runs/ goes with a session: the first extends rising's grid and commits the merged table; the next starts
    from that table alone, without the first's grid-extensions.json, and reads the added LRs' runs from it."""
    suite_file = write_suite(tmp_path, extend=True)
    assert sweep(suite_file, tmp_path / "first", StandInFits(), monkeypatch, "--from-table", str(committed)) == 0
    argv = [str(tmp_path / "first" / "ext"), "--from-table", str(committed), "--suite", str(suite_file)]
    assert compare_command.main([*argv, "--out", str(tmp_path / "session1"), "--no-tensorboard"]) == 0
    capsys.readouterr()
    fits, table = StandInFits(), str(tmp_path / "session1" / "runs.csv")
    assert sweep(suite_file, tmp_path / "second", fits, monkeypatch, "--from-table", table) == 0
    assert fits.started == [("rising", 1e-3, 0)], "the witness alone: the LRs the first session added are the table's"
    inside = "extend_grid: rising: optimum inside its grid (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)"
    assert inside in capsys.readouterr().out
    record = json.loads((tmp_path / "second" / "ext" / RECORD).read_text())["extensions"]
    assert [(e["lr"], e["number"]) for e in record] == [(8e-3, 1), (1.6e-2, 2), (3.2e-2, 3)], "the ceiling counts them"


def test_a_widened_grid_runs_only_its_new_lr_after_the_witness(tmp_path, committed, monkeypatch, capsys):
    suite_file = write_suite(tmp_path, extend=False)
    document = yaml.safe_load(suite_file.read_text())
    suite_file.write_text(yaml.safe_dump({**document, "lrs": [*GRID, 8.0e-3]}, sort_keys=False))
    fits = StandInFits()
    assert sweep(suite_file, tmp_path / "runs", fits, monkeypatch, "--from-table", str(committed)) == 0
    assert fits.started[0] == ("rising", 1e-3, 0), "the witness first"
    assert sorted(fits.started[1:]) == sorted((v, 8e-3, seed) for v in ("rising", "bracketed") for seed in (0, 1, 2))
    assert "then the 6 planned runs it lacks" in capsys.readouterr().out


def test_a_table_of_another_suite_or_of_none_of_the_planned_runs_is_refused_before_any_run(
    tmp_path, monkeypatch, capsys
):
    table = tmp_path / "runs.csv"
    row = {"suite": "other", "variant": "rising", "lr": 1e-3, "seed": 0, "status": "finished", "path": "x"}
    pd.DataFrame([row]).to_csv(table, index=False)
    fits, suite_file = StandInFits(), write_suite(tmp_path, extend=True)
    assert sweep(suite_file, tmp_path / "runs", fits, monkeypatch, "--from-table", str(table)) == 2
    assert "holds the runs of other, not of ext" in capsys.readouterr().err
    pd.DataFrame([{**row, "suite": "ext", "lr": 0.5}]).to_csv(table, index=False)
    assert sweep(suite_file, tmp_path / "runs", fits, monkeypatch, "--from-table", str(table)) == 2
    assert "holds none of the runs this sweep plans" in capsys.readouterr().err
    assert fits.started == []


def test_a_table_that_is_not_a_runs_table_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    table = tmp_path / "runs.csv"
    table.write_text("not,a\nruns,table\n")
    fits = StandInFits()
    code = sweep(write_suite(tmp_path, extend=True), tmp_path / "runs", fits, monkeypatch, "--from-table", str(table))
    error = capsys.readouterr().err.strip()
    assert code == 2 and fits.started == [] and "\n" not in error
    assert error.startswith(f"andrea sweep: error: --from-table {table}: not a runs.csv that andrea compare wrote")


@pytest.mark.parametrize(
    ("columns", "expected"),
    [
        ({"machine": "Some Other CPU"}, "its runs ran on Some Other CPU and this machine is"),
        ({"threads": 3}, "its runs ran at 3 thread(s) a fit and this sweep gives a fit 1"),
    ],
)
def test_a_table_from_another_cpu_kind_or_thread_count_is_refused_before_the_witness(
    tmp_path, committed, monkeypatch, capsys, columns, expected
):
    table = read_runs_csv(committed)
    for column, value in columns.items():
        table[column] = value
    write_runs_csv(table, committed)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    fits = StandInFits()
    code = sweep(
        write_suite(tmp_path, extend=True), tmp_path / "runs", fits, monkeypatch, "--from-table", str(committed)
    )
    assert code == 2 and fits.started == []
    assert expected in capsys.readouterr().err


def test_a_drifted_bf16_witness_from_a_table_that_does_not_say_whether_it_compiled_says_how_to_choose():
    from andrea_lab.experiments.sweep.from_table import TableRun, _compile_hint

    numbers = (5.5, 2.0, 2.1)
    assert "--speed bf16-compiled, else --speed bf16" in _compile_hint(TableRun("finished", numbers, 2.1, "bf16-mixed"))
    for said in (TableRun("finished", numbers, 2.1, "bf16-mixed", True), TableRun("finished", numbers, 2.1, "32-true")):
        assert _compile_hint(said) == "", "the table says, or the run was fp32 (the rule never compiles fp32)"


def test_a_tables_compiled_cell_is_read_as_said_only_when_it_is_0_or_1():
    import pandas as pd

    from andrea_lab.runs.committed_table import compiled_of

    assert [compiled_of(value) for value in (1, 0, 1.0)] == [True, False, True]
    # Anything else in a handed table is "not said": the rule guesses and the witness checks, never a crash.
    assert {compiled_of(value) for value in (-1, 2.5, float("nan"), None, pd.NA, "yes", [1])} == {None}
