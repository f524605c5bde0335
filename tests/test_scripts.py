"""scripts/*.py on handed folders and files: a missing or damaged input is one line naming it, exit status 2,
never a traceback (errors.run_script, as `andrea` ends its commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def damaged_run(root: Path) -> Path:
    """A run directory whose summary.json is JSON, but its gave-way records are not what andrea fit writes."""
    run = root / "v" / "lr1e-3-seed0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished", "gave_way_first": [{"event": "spike"}]}))
    (run / "config.yaml").write_text("x: [\n")
    return root


@pytest.mark.parametrize(
    "script, args, message",
    [
        (
            "stream_at_init",
            ["{tmp}/nowhere.yaml"],
            "stream_at_init: error: suite file '{tmp}/nowhere.yaml' does not exist",
        ),
        ("stream_at_init", ["{tmp}/runs/v/lr1e-3-seed0/config.yaml"], "is not valid YAML"),
        (
            "replay_gave_way",
            ["{tmp}/runs"],
            "replay_gave_way: error: {tmp}/runs/v/lr1e-3-seed0/summary.json: gave_way_first holds {{'event': 'spike'}}",
        ),
        ("replay_gave_way", ["{tmp}/nowhere"], "no finished runs under {tmp}/nowhere"),
        (
            "replicate_spread",
            ["{tmp}/runs", "{tmp}/nowhere"],
            "replicate_spread: error: {tmp}/nowhere is not a directory",
        ),
        ("replicate_spread", ["{tmp}/runs", "{tmp}/runs"], "no run in {tmp}/runs matches one in {tmp}/runs"),
    ],
)
def test_a_script_on_a_bad_folder_says_so_in_one_line(script, args, message, tmp_path):
    damaged_run(tmp_path / "runs")
    command = [sys.executable, str(REPO / "scripts" / f"{script}.py"), *(a.format(tmp=tmp_path) for a in args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert message.format(tmp=tmp_path) in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "runs, suite, message",
    [
        (
            "nowhere",
            "ladder",
            "ladder_predict: error: {tmp}/nowhere is not a directory; give the ladder's runs directory",
        ),
        ("empty", "optimizers", "optimizers.yaml has no ladder: section; a prediction is of a ladder's top rung"),
        (
            "empty",
            "ladder",
            "rungs d64, d96, d128 of {tmp}/empty are not finished; a prediction needs every lower rung",
        ),
    ],
)
def test_ladder_predict_refuses_what_it_cannot_predict_from_and_writes_nothing(runs, suite, message, tmp_path):
    """scripts/ladder_predict.py (issue 54): a missing runs folder, a suite that is no ladder and a ladder whose
    lower rungs are not all finished are one line each, exit 2, and no prediction file is written."""
    (tmp_path / "empty").mkdir()
    out = tmp_path / "prediction.json"
    suite_file = REPO / "experiments" / "suites" / f"{suite}.yaml"
    command = [
        sys.executable,
        str(REPO / "scripts" / "ladder_predict.py"),
        str(tmp_path / runs),
        str(suite_file),
        str(out),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert message.format(tmp=tmp_path) in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_ladder_predict_end_to_end_extrapolates_each_decision_from_a_committed_runs_csv(tmp_path):
    """scripts/ladder_predict.py on a constructed ladder's runs.csv of its two lower rungs: relu − gelu is +0.05
    at the lowest rung and −0.05 at the next, so its line in log compute reaches the top rung below zero; the
    file's sha256 is the one printed, and a second run does not overwrite it."""
    import hashlib

    import numpy as np

    from andrea_lab.experiments.compare.runs_table import write_runs_csv
    from andrea_lab.experiments.sweep import ladder_compute
    from andrea_lab.experiments.sweep.plan import plan_sweep
    from andrea_lab.experiments.sweep.suite import load_suite
    from tests.experiments.compare.test_ladder_report import _document, _runs
    from tests.experiments.sweep.test_ladder import write

    suite_file = write(tmp_path, _document())
    suite = load_suite(suite_file)
    runs = _runs(suite, {"small": 0.05, "mid": -0.05, "big": 0.0})
    write_runs_csv(runs[runs["scale"] != "big"], tmp_path / "runs.csv")
    out = tmp_path / "prediction.json"
    command = [sys.executable, str(REPO / "scripts" / "ladder_predict.py"), str(tmp_path / "runs.csv"), str(suite_file)]
    result = subprocess.run([*command, str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert f"prediction: {{file: prediction.json, sha256: {digest}}}" in result.stdout
    compute = {r.rung: r.flops for r in ladder_compute.ladder_compute(suite, plan_sweep(suite, "runs"))}
    slope = (-0.05 - 0.05) / (np.log10(compute["mid"]) - np.log10(compute["small"]))
    expected = -0.05 + slope * (np.log10(compute["big"]) - np.log10(compute["mid"]))
    decision = json.loads(out.read_text())["decisions"]["relu vs gelu"]
    assert decision["value"] == pytest.approx(expected, abs=1e-6) and decision["sign"] == -1
    # Both variants are best at 3e-3 on both lower rungs, with the loss rising 3.5x faster to the right (10 per
    # unit LR, 0.02 at 1e-3 and 0.07 at 1e-2): the interpolated optimum sits left of it, the bracket around it.
    assert "lrs: {gelu: [1.1e-03, 2.3e-03, 4.6e-03], relu: [1.1e-03, 2.3e-03, 4.6e-03]}" in result.stdout
    assert (
        "standard error in decades of LR (a bracket narrower than it may miss): gelu ± n/a, relu ± n/a" in result.stdout
    )
    assert "so decisions keep common LRs:\n  lrs: {gelu: [1.1e-03, 2.3e-03, 4.6e-03], relu: [1.1e-03" in result.stdout
    assert "compared on loss only" not in result.stdout, "one bracket for both: the decision keeps every kind"
    again = subprocess.run([*command, str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 2 and "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest


def test_ladder_predict_moves_onto_the_reference_bracket_only_the_optima_inside_it():
    """The top rung's LR sensitivity is compared on the LRs both variants ran: brackets 1.25x apart share none.
    A variant whose own optimum lies inside the reference's bracket gets that bracket (still bracketed); one
    whose optimum lies outside keeps its own, and its decision is then compared on loss only."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ladder_predict", REPO / "scripts" / "ladder_predict.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    own = {"pre": [6e-4, 1.2e-3, 2.4e-3], "post": [7.5e-4, 1.5e-3, 3e-3], "deepnorm": [9e-5, 1.8e-4, 3.6e-4]}
    shared = script.shared_brackets(own, "pre")
    assert shared == {"pre": own["pre"], "post": own["pre"], "deepnorm": own["deepnorm"]}
    assert script.shared_brackets(own, "absent") == own
