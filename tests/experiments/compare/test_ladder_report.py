"""compare's ladder report: the decision-accuracy table from a suite's ladder, rungs missing until finished, and
the recorded prediction scored or refused (issue 54)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from andrea_lab.experiments.compare import ladder, ladder_predictions, ladder_report
from andrea_lab.experiments.compare.ladder import Decision
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import load_suite
from tests.experiments.sweep.test_ladder import ladder_document, write


def _document() -> dict:
    document = ladder_document()
    mid = {"model.config.d_model": 48, "model.config.n_head": 2, "trainer.max_steps": 20}
    document["scales"].insert(1, {"name": "mid", "overrides": mid})
    return document


def _runs(suite, effect: dict[str, float]) -> pd.DataFrame:
    """One finished run per planned cell: relu − gelu = ``effect[rung]`` at every LR and seed, gelu's loss
    falling with the rung and best at 3e-3."""
    rows = []
    for spec in plan_sweep(suite, "runs"):
        loss = 2.0 - 0.1 * spec.scale_index + abs(spec.lr - 3e-3) * 10 + 0.001 * spec.seed
        rows.append(
            dict(suite=suite.name, variant=spec.variant, lr=spec.lr, seed=spec.seed, status="finished",
                 heldout_loss=loss + (effect[spec.scale] if spec.variant == "relu" else 0.0), initial_val_loss=5.5,
                 divergence_kind=None, scale=spec.scale, scale_index=spec.scale_index, path=str(spec.run_dir))
        )  # fmt: skip
    return pd.DataFrame(rows)


def _report(suite, runs: pd.DataFrame, out: Path) -> str:
    """The report with the counts compare hands it (made up: the compute only sets the ratio column)."""
    planned = ladder.planned_cells((spec.scale, spec.variant) for spec in plan_sweep(suite, "runs"))
    compute = {name: 10.0**index for index, name in enumerate(planned)}
    return ladder_report.write_ladder_report(suite, runs, out, compute, planned)


def test_the_report_gives_each_lower_rung_its_accuracy_and_a_rung_still_running_none(tmp_path):
    suite = load_suite(write(tmp_path, _document()))
    runs = _runs(suite, {"small": 0.05, "mid": -0.05, "big": -0.1})
    text = _report(suite, runs, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "decision_accuracy.csv").set_index(["rung", "kind"])
    assert table.loc[("small", "loss"), "accuracy"] == 0.0 and table.loc[("mid", "loss"), "accuracy"] == 1.0
    assert "No prediction recorded" in text and (tmp_path / "out" / "ladder.md").read_text() == text
    # One top-rung run missing: the top is missing and no rung has an accuracy.
    partial = runs.drop(runs.index[runs["scale"] == "big"][:1])
    _report(suite, partial, tmp_path / "out2")
    table = pd.read_csv(tmp_path / "out2" / "decision_accuracy.csv").set_index(["rung", "kind"])
    assert table.loc[("big", "loss"), "status"] == "missing" and table["accuracy"].isna().all()


def test_the_recorded_prediction_is_scored_once_the_top_rung_finished(tmp_path):
    suite = load_suite(write(tmp_path, _document()))
    lower = _runs(suite, {"small": 0.05, "mid": 0.0, "big": -0.1})
    compute = {"small": 1.0e9, "mid": 4.0e9, "big": 3.0e10}
    prediction = ladder_predictions.make_prediction(
        lower[lower["scale"] != "big"], ["small", "mid"], compute, [Decision("relu", "gelu")], "big", "lad"
    )
    digest = ladder_predictions.write_prediction(tmp_path / "p.json", prediction)
    document = _document()
    document["ladder"]["prediction"] = {"file": "p.json", "sha256": digest}
    suite = load_suite(write(tmp_path, document))
    text = _report(suite, lower, tmp_path / "out")
    assert f"Prediction p.json, sha256 {digest}" in text
    scored = pd.read_csv(tmp_path / "out" / "predictions_scored.csv").set_index("name")
    assert scored.loc["relu vs gelu", "actual"] == pytest.approx(-0.1)
    assert scored.loc["relu vs gelu", "sign_right"] == (prediction["decisions"]["relu vs gelu"]["sign"] == -1)
    # The file edited after it was recorded: refused when the suite loads.
    Path(tmp_path / "p.json").write_text(json.dumps({**prediction, "suite": "lad"}, indent=1))
    assert hashlib.sha256((tmp_path / "p.json").read_bytes()).hexdigest() != digest
    with pytest.raises(ValueError, match="not the .* recorded"):
        load_suite(write(tmp_path, document))


def test_andrea_compare_prints_and_writes_the_ladder_table(tmp_path, capsys):
    from andrea_lab.commands.compare import main as compare_main
    from andrea_lab.experiments.compare.runs_table import write_runs_csv

    suite_path = write(tmp_path, _document())
    runs = _runs(load_suite(suite_path), {"small": 0.05, "mid": -0.05, "big": -0.1})
    write_runs_csv(runs, tmp_path / "runs.csv")
    assert compare_main([str(tmp_path / "runs.csv"), "--suite", str(suite_path), "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    assert "## Ladder: decision accuracy against the top rung (big)" in printed
    assert "| small |" in printed and "0.00 [0.00, 0.00] of 1" in printed
    assert (tmp_path / "c" / "decision_accuracy.csv").is_file() and (tmp_path / "c" / "decision_accuracy.png").is_file()


def test_the_top_rungs_start_is_read_from_the_runs_table_so_a_committed_csv_scores_alike(tmp_path):
    """The prediction's 'committed before the top rung ran' check needs the top rung's first start; a committed
    runs.csv has no run directories, so the time travels in its ``started`` column (the sweep's own)."""
    from datetime import datetime, timezone

    from andrea_lab.experiments.compare.runs_table import read_runs_csv, write_runs_csv

    suite = load_suite(write(tmp_path, _document()))
    runs = _runs(suite, {"small": 0.05, "mid": -0.05, "big": -0.1})
    runs["started"] = "2026-12-06T09:30:00+0000"
    top = runs.index[runs["scale"] == "big"]
    runs.loc[top[1], "started"] = "2026-12-06T08:15:00+0100"  # the earliest, in another zone
    runs.loc[top[2], "started"] = "not a time"  # a handed cell: skipped, not a crash
    write_runs_csv(runs, tmp_path / "runs.csv")
    back = read_runs_csv(tmp_path / "runs.csv")
    assert ladder_report.top_started(back, "big") == datetime(2026, 12, 6, 7, 15, tzinfo=timezone.utc)
    assert ladder_report.top_started(back.drop(columns="started"), "big") is None
