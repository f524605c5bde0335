"""The three failures as compare reads them, from a runs.csv's divergence columns, and the claims that count them."""

from __future__ import annotations

import pandas as pd
import pytest

from andrea_lab.experiments.compare.claims import evaluate_claims
from andrea_lab.experiments.compare.outcomes import with_outcomes
from andrea_lab.experiments.compare.stats import counted_runs

ROSE = ("diverged", "trained_then_diverged", "loss_rose")


def _run(variant, lr, seed, final, best=None, status="finished", kind=None, cause=None, step=None):
    return dict(
        variant=variant,
        lr=lr,
        seed=seed,
        status=status,
        initial_val_loss=5.5,
        final_val_loss=final,
        best_val_loss=final if best is None else best,
        divergence_kind=kind,
        divergence_cause=cause,
        divergence_step=step,
    )


def _table(rows) -> pd.DataFrame:
    return pd.DataFrame(rows).astype({"divergence_kind": "object", "divergence_cause": "object"})


def test_a_runs_csv_is_read_under_the_three_outcomes_and_a_recovered_rise_is_a_finished_spike():
    runs = _table(
        [
            _run("qk", 0.3, 0, 1.854, 1.854, *ROSE, step=1252),  # came back to its best: a spike
            _run("base", 0.1, 0, 2.779, 2.309, *ROSE, step=1034),  # stayed 0.47 above its best: regressed
            _run("base", 0.3, 0, 3.07, 3.05, "diverged", "stuck_at_unigram", step=150),
            _run("base", 0.3, 1, None, 2.9, "diverged", "trained_then_diverged", "nonfinite", step=900),
            _run("base", 0.01, 0, 2.2),
        ]
    )
    read = with_outcomes(runs)
    assert list(read["outcome"]) == ["trained", "regressed", "stuck", "blew_up", "trained"]
    spike = read.iloc[0]
    assert spike["status"] == "finished" and spike["rise_step"] == 1252 and pd.isna(spike["divergence_kind"])
    assert read.iloc[1]["outcome_size"] == pytest.approx(0.47) and read.iloc[1]["outcome_step"] == 1034
    assert list(read["failed"]) == [False, True, True, True, False]
    assert with_outcomes(read).equals(read), "reading twice changes nothing"
    assert list(counted_runs(runs, "final_val_loss")["diverged"]) == [False, True, True, True, False]


def _grid() -> pd.DataFrame:
    """At LR 4e-3 ``post`` is stuck in 4 of 5 seeds and ``pre`` trains; at 1e-2 ``pre`` regresses in 4 of 5
    seeds and ``post`` blows up in 1; at 1e-3 both train, ``post`` 0.02 worse."""
    rows = []
    for seed in range(5):
        rows.append(_run("pre", 1e-3, seed, 2.40 + seed / 100))
        rows.append(_run("post", 1e-3, seed, 2.42 + seed / 100))
        rows.append(_run("pre", 4e-3, seed, 2.30 + seed / 100))
        stuck = seed < 4
        rows.append(
            _run("post", 4e-3, seed, 3.07, 3.05, "diverged", "stuck_at_unigram", step=150)
            if stuck
            else _run("post", 4e-3, seed, 2.35)
        )
        rows.append(_run("pre", 1e-2, seed, 2.8, 2.35, *ROSE, step=1000) if seed < 4 else _run("pre", 1e-2, seed, 2.36))
        rows.append(
            _run("post", 1e-2, seed, None, None, "diverged", "nonfinite", step=40)
            if seed == 0
            else _run("post", 1e-2, seed, 2.50)
        )
    return _table(rows)


def test_each_count_claim_counts_its_own_outcome_and_fewer_divergences_names_them_all():
    claims = [
        {"fewer_stuck": ["pre", "post"], "lr": 4e-3, "exploratory": True},
        {"fewer_regressions": ["post", "pre"], "lr": 1e-2, "exploratory": True},
        {"fewer_blowups": ["pre", "post"], "exploratory": True},
        {"fewer_divergences": ["pre", "post"], "exploratory": True},
    ]
    stuck, regressions, blowups, divergences = evaluate_claims(claims, _grid())
    assert stuck.evidence.startswith("stuck pre 0/5, post 4/5 paired by seed")
    assert regressions.evidence.startswith("regressed post 0/5, pre 4/5 paired by seed")
    assert blowups.evidence.startswith("blew up pre 0/15, post 1/15 paired by (lr, seed)")
    assert divergences.evidence.startswith("failed (stuck, regressed or blew up) pre 4/15, post 5/15")
    assert divergences.evidence.endswith("failures: pre regressed 4; post stuck 4, blew up 1")


def test_a_loss_claim_at_a_fixed_lr_where_one_side_is_mostly_stuck_says_so_in_its_verdict():
    at_plateau, trained, without_stuck = evaluate_claims(
        [
            {"lower_loss": ["pre", "post"], "lr": 4e-3, "exploratory": True},
            {"lower_loss": ["pre", "post"], "lr": 1e-3, "exploratory": True},
            {"lower_loss_trained": ["pre", "post"], "lr": 4e-3, "exploratory": True},
        ],
        _grid(),
    )
    assert "post stuck 4/5 at 4e-3: it measures the unigram plateau, not a trained model's loss" in at_plateau.caveat
    assert "stuck" not in trained.caveat
    assert "stuck" not in without_stuck.caveat and "4 of 5 pairs left out" in without_stuck.evidence


def test_a_records_outcome_travels_through_runs_csv_with_its_rise(tmp_path):
    """A fit's summary.json outcome (here a spike with its size and length) is runs.csv's outcome columns, and
    reading the table back keeps them (a table from before the record re-derives them instead)."""
    import json

    from andrea_lab.experiments.compare.runs_table import load_runs, read_runs_csv, write_runs_csv
    from andrea_lab.experiments.sweep.suite import run_version
    from tests.experiments.compare.test_compare import write_run

    root = tmp_path / "runs"
    for seed in range(2):
        write_run(root, "a", 1e-3, seed, 2.3 + seed / 10, index=0)
    path = root / "toy" / "a" / run_version(1e-3, 0) / "summary.json"
    record = json.loads(path.read_text())
    rise = {"step": 900, "size": 1.2, "length": 140}
    record["outcome"] = {"kind": "trained", "step": None, "size": None, "rise": rise}
    path.write_text(json.dumps(record))
    written = tmp_path / "runs.csv"
    write_runs_csv(load_runs(root), written)
    read = with_outcomes(read_runs_csv(written)).set_index("seed")
    assert (read.loc[0, "outcome"], read.loc[0, "rise_step"], read.loc[0, "rise_size"]) == ("trained", 900, 1.2)
    assert read.loc[0, "rise_length"] == 140
    assert read.loc[1, "outcome"] == "trained" and pd.isna(read.loc[1, "rise_step"])


def test_a_run_recorded_diverged_without_a_kind_is_an_unnamed_failure_and_an_empty_kind_is_none():
    runs = _table([_run("a", 1e-3, 0, 3.0, status="diverged"), _run("a", 1e-3, 1, 2.2, kind="")])
    read = with_outcomes(runs)
    assert list(read["outcome"]) == ["diverged", "trained"] and list(read["failed"]) == [True, False]
    assert not read["stuck"].any() and not read["regressed"].any() and not read["blew_up"].any()
