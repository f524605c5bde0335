"""A handed runs.csv whose row lacks its suite, variant, LR or seed is refused in one line naming the line and
the cell (an empty variant or suite cell was a TypeError inside compare's grouping)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from andrea_lab import cli
from andrea_lab.experiments.compare.runs_table import read_runs_csv

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("column", ["suite", "variant", "lr", "seed"])
def test_compare_refuses_a_runs_csv_row_with_an_empty_identity_cell(column, tmp_path, capsys):
    rows = list(csv.reader((REPO / "docs" / "results" / "aa" / "runs.csv").open(newline="")))
    rows[3][rows[0].index(column)] = ""
    handed = tmp_path / "runs.csv"
    with handed.open("w", newline="") as file:
        csv.writer(file).writerows(rows)
    status = cli.main(["compare", str(handed), "--out", str(tmp_path / "out"), "--no-tensorboard"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    assert f"{handed}, line 4: the {column!r} cell is empty" in err
    assert not (tmp_path / "out").exists()


def test_an_intact_runs_csv_is_read_whole():
    table = read_runs_csv(REPO / "docs" / "results" / "aa" / "runs.csv")
    assert len(table) == 48 and table["variant"].notna().all()


def test_a_count_that_is_not_a_whole_int64_number_is_read_as_missing(tmp_path):
    """warmup_steps 1e21 (a run recorded before the fit bounded it) or an edited 2.5 made pandas' integer column
    raise "cannot safely cast non-equivalent float64 to int64" and ended compare in a traceback."""
    rows = list(csv.reader((REPO / "docs" / "results" / "aa" / "runs.csv").open(newline="")))
    rows[1][rows[0].index("warmup_steps")] = "1e21"
    rows[2][rows[0].index("steps")] = "2.5"
    handed = tmp_path / "runs.csv"
    with handed.open("w", newline="") as file:
        csv.writer(file).writerows(rows)
    table = read_runs_csv(handed)
    assert table["warmup_steps"].isna().sum() == 1 and table["steps"].isna().sum() == 1
    assert table["warmup_steps"].dropna().eq(40).all() and str(table["steps"].dtype) == "Int64"
