"""Handed text reaches compare's CSVs as text, never as a spreadsheet formula (OWASP CSV injection; issue 59),
and the project's own reader gives back what the runs said."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd

from andrea_lab.commands.compare import main as compare_main
from andrea_lab.experiments.compare.csv_cells import FORMULA_STARTS, as_text, neutralised, restored
from andrea_lab.experiments.compare.runs_table import read_runs_csv
from andrea_lab.runs.directory import DONE_MARKER, START_MARKER, HeldOut, RunRecord, write_record

HOSTILE = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tTAB", "\rCR", "'quoted"]


def test_as_text_quotes_what_a_spreadsheet_would_run_and_nothing_else():
    assert [as_text(value) for value in HOSTILE] == ["'" + value for value in HOSTILE]
    assert [as_text(value) for value in ("pre", "lr1e-3", 0.5, -1.0, None)] == ["pre", "lr1e-3", 0.5, -1.0, None]
    assert set(FORMULA_STARTS) == {"=", "+", "-", "@", "\t", "\r"}


def test_neutralised_then_restored_is_the_frame_and_numbers_are_untouched():
    frame = pd.DataFrame({"variant": [*HOSTILE, "pre", None], "loss": [-1.5] * 8 + [float("nan")]})
    safe = neutralised(frame)
    assert all(not str(v).startswith(FORMULA_STARTS) for v in safe["variant"].dropna())
    assert safe["loss"].equals(frame["loss"])
    assert restored(safe).equals(frame)


def hostile_runs(root: Path) -> Path:
    """A suite directory of two variants whose sweep markers name them with formulas (a handed directory)."""
    for variant, loss in (("=1+1", 2.5), ("@cmd", 2.7)):
        for seed in (0, 1, 2):
            run = root / "s" / f"v{loss}" / f"lr1e-3-seed{seed}"
            run.mkdir(parents=True)
            (run / START_MARKER).write_text(json.dumps({"suite": "s", "variant": variant, "lr": 1e-3, "seed": seed}))
            (run / DONE_MARKER).write_text(json.dumps({"status": "finished"}))
            heldout = HeldOut(loss + seed / 100, 0.05, 4096, 12, 64, 100_000, True, "documents", 0)
            write_record(run, RunRecord(status="finished", lr=1e-3, seed=seed, steps=10, heldout=heldout))
    return root


def cells(path: Path) -> list[str]:
    with path.open(newline="") as handle:
        return [cell for row in csv.reader(handle) for cell in row]


def test_compare_writes_handed_names_as_text_and_reads_them_back(tmp_path, capsys):
    root = hostile_runs(tmp_path / "runs")
    out = tmp_path / "report"
    assert compare_main([str(root), "--out", str(out), "--no-claims", "--no-tensorboard"]) == 0, capsys.readouterr()
    for name in ("runs.csv", "comparison.csv"):
        formulas = [cell for cell in cells(out / name) if cell.startswith(("=", "@"))]
        assert not formulas, f"{name}: {formulas}"
    assert {"'=1+1", "'@cmd"} <= set(cells(out / "runs.csv"))
    assert set(read_runs_csv(out / "runs.csv")["variant"]) == {"=1+1", "@cmd"}
