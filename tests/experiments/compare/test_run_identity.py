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
