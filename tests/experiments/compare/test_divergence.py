"""Divergence apart from loss: exact rates, paired counts, and whether the stuck window was equal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from andrea_lab.experiments.compare.compare import build_variants, per_lr_table
from andrea_lab.experiments.compare.divergence import (
    any_outcome_to_tell,
    clopper_pearson,
    describe_kinds,
    describe_rate,
    gave_way_lines,
    mcnemar_exact_p,
    paired_divergences,
    stuck_window_note,
    stuck_windows,
)
from andrea_lab.experiments.compare.runs_table import load_runs, read_runs_csv, write_runs_csv
from andrea_lab.experiments.compare.stats import counted_runs
from andrea_lab.experiments.sweep.suite import run_version
from andrea_lab.runs.directory import BLEW_UP, NONFINITE, STUCK_AT_UNIGRAM, TRAINED_THEN_DIVERGED
from tests.experiments.compare.test_compare import write_run

REPO = Path(__file__).resolve().parents[3]


def test_clopper_pearson_known_answers():
    # 0 of 5: [0, 1 - 0.025^(1/5)] = [0, 0.5218]; 5 of 5 mirrors it; 3 of 5 from the beta quantiles.
    assert clopper_pearson(0, 5) == pytest.approx((0.0, 1 - 0.025 ** (1 / 5)))
    assert clopper_pearson(5, 5) == pytest.approx((0.025 ** (1 / 5), 1.0))
    assert clopper_pearson(3, 5) == pytest.approx((0.1466328, 0.9472550), abs=1e-6)
    assert all(math.isnan(x) for x in clopper_pearson(0, 0))
    assert describe_rate(3, 5) == "3/5 [15 %, 95 %]" and describe_rate(0, 0) == "0/0"


def test_exact_mcnemar():
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(0, 7) == pytest.approx(2 / 2**7)
    assert mcnemar_exact_p(3, 3) == pytest.approx(1.0)


def test_paired_divergences_over_the_grid_and_at_fixed_lrs():
    runs = pd.DataFrame(
        [
            dict(variant=v, lr=lr, seed=s, diverged=(v == "b" and lr == 2.0 and s < 2))
            for v in "ab"
            for lr in (1.0, 2.0)
            for s in range(3)
        ]
    )
    grid = paired_divergences(runs, "a", "b")
    assert (grid.pairs, grid.diverged_a, grid.diverged_b, grid.only_b, grid.unit) == (6, 0, 2, 2, "(lr, seed)")
    fixed = paired_divergences(runs, "a", "b", {"a": 1.0, "b": 2.0})
    assert (fixed.pairs, fixed.only_a, fixed.only_b, fixed.unit) == (3, 0, 2, "seed")


def test_the_committed_norm_placement_runs_had_unequal_stuck_windows():
    runs = read_runs_csv(REPO / "docs" / "results" / "norm_placement" / "runs.csv")
    assert stuck_windows(runs) == {"post": 40, "post-nowarmup": 0, "post-warmup100": 100, "pre": 40, "pre-nowarmup": 0}
    note = stuck_window_note(runs)
    assert note.startswith("Divergence counts are not on equal footing across these variants: these runs predate")
    assert "(post-nowarmup 0, pre-nowarmup 0, post 40, pre 40, post-warmup100 100;" in note


def test_runs_with_stuck_after_set_have_one_window():
    runs = pd.DataFrame({"variant": ["a", "b"], "warmup_steps": [0, 100], "stuck_after": [100, 100]})
    assert stuck_window_note(runs) == "Stuck-at-unigram window: from step 100 for every variant."
    assert stuck_window_note(runs.assign(stuck_after=[50, 100])).startswith(
        "Divergence counts are not on equal footing across these variants: the variants' stuck-at-unigram windows"
    )
    assert stuck_window_note(runs.assign(warmup_steps=[None, None], stuck_after=[None, None])) is None  # unknown


def _diverge(run_dir: Path, divergence: dict) -> None:
    path = run_dir / "summary.json"
    record = json.loads(path.read_text())
    record.update(status="diverged", divergence=divergence)
    path.write_text(json.dumps(record))


def test_trained_then_diverged_is_told_apart_in_runs_csv_and_in_the_per_lr_table(tmp_path):
    root = tmp_path / "runs"
    for seed in range(3):
        write_run(root, "b", 1e-3, seed, 2.3 + seed / 10, index=0)
        write_run(root, "a", 1e-3, seed, 2.4 + seed / 10, index=1)
    _diverge(
        root / "toy" / "a" / run_version(1e-3, 0), {"step": 530, "kind": TRAINED_THEN_DIVERGED, "cause": "loss_rose"}
    )
    _diverge(
        root / "toy" / "a" / run_version(1e-3, 1), {"step": 412, "kind": TRAINED_THEN_DIVERGED, "cause": NONFINITE}
    )
    _diverge(root / "toy" / "a" / run_version(1e-3, 2), {"step": 40, "kind": STUCK_AT_UNIGRAM})
    _diverge(root / "toy" / "b" / run_version(1e-3, 2), {"step": 361, "kind": BLEW_UP})
    written = tmp_path / "runs.csv"
    write_runs_csv(load_runs(root), written)
    runs = read_runs_csv(written)
    causes = runs.set_index(["variant", "seed"])["divergence_cause"]
    assert (causes[("a", 0)], causes[("a", 1)]) == ("loss_rose", NONFINITE) and pd.isna(causes[("a", 2)])
    # Under the three outcomes (andrea_lab.runs.outcome): the non-finite one blew up, the one whose loss rose
    # (its record has no best loss to measure the regression by) regressed from its onset.
    assert describe_kinds(runs[runs["variant"] == "a"]) == (
        "stuck 1; blew up 1; regressed 1 (by an unknown amount from step 530)"
    )
    assert describe_kinds(runs[runs["variant"] == "b"]) == "blew up 1"
    table = per_lr_table(build_variants(runs, reference="b"))
    assert "divergence_kinds" in table
    # The non-finite run's loss is not a model's: like a `nonfinite` run it counts at its loss at init; the run
    # whose loss rose keeps its (finite) held-out loss.
    capped = counted_runs(runs, "heldout_loss").set_index(["variant", "seed"])["capped"]
    assert (capped[("a", 1)], capped[("a", 0)]) == (5.5, pytest.approx(2.4))


def test_runs_that_all_trained_keep_their_per_lr_columns_and_a_failure_adds_how_they_ended():
    runs = read_runs_csv(REPO / "docs" / "results" / "norm_placement" / "runs.csv")
    trained = runs[runs["status"] == "finished"]
    assert not any_outcome_to_tell(trained)
    assert "divergence_kinds" not in per_lr_table(build_variants(trained))
    assert any_outcome_to_tell(runs)  # its post-norm runs stuck at high LRs
    assert "divergence_kinds" in per_lr_table(build_variants(runs))


def test_what_gave_way_first_reaches_runs_csv_and_a_per_variant_table(tmp_path):
    root = tmp_path / "runs"
    records = {
        0: [
            {
                "event": "divergence",
                "step": 900,
                "signal": "attn_logit_max_head/block_01_h0",
                "left_band_at": 850,
                "lead_steps": 50,
                "also": [["attn_entropy/block_01_min", 860]],
            }
        ],
        1: [
            {"event": "spike", "step": 300, "signal": None, "left_band_at": None, "lead_steps": None, "also": []},
            {
                "event": "divergence",
                "step": 1000,
                "signal": "attn_entropy/block_00_min",
                "left_band_at": 970,
                "lead_steps": 30,
                "also": [],
            },
        ],
        2: [{"event": "spike", "step": 300, "signal": None, "left_band_at": None, "lead_steps": None, "also": []}],
    }
    for seed, gave_way in records.items():
        write_run(root, "b", 1e-3, seed, 2.3, index=0)
        run_dir = write_run(root, "a", 1e-3, seed, 2.4, index=1)
        record = json.loads((run_dir / "summary.json").read_text())
        (run_dir / "summary.json").write_text(json.dumps({**record, "gave_way_first": gave_way}))
    written = tmp_path / "runs.csv"
    write_runs_csv(load_runs(root), written)
    runs = read_runs_csv(written)
    a = runs[runs["variant"] == "a"].set_index("seed")
    assert (
        a.loc[0, "gave_way_first"] == "divergence: attn_logit_max_head/block_01_h0" and a.loc[0, "gave_way_lead"] == 50
    )
    assert a.loc[1, "gave_way_first"] == "divergence: attn_entropy/block_00_min", "the divergence's record wins"
    assert a.loc[2, "gave_way_first"] == "spike: none" and pd.isna(a.loc[2, "gave_way_lead"])
    lines = gave_way_lines(runs)
    assert "| a | attn_entropy (divergence) | 1 | 30 [30, 30] |" in lines
    assert "| a | attn_logit_max_head (divergence) | 1 | 50 [50, 50] |" in lines
    assert "| a | none (spike) | 1 | n/a |" in lines
    assert gave_way_lines(runs[runs["variant"] == "b"]) == []
    # The suite's order (a is variant 1), whatever order the frame's rows came in: one report for the same runs.
    two = runs.assign(variant=runs["variant"].where(runs["seed"] != 2, "c"))
    two.loc[two["variant"] == "c", "variant_index"] = 0
    named = lambda frame: [line.split(" | ")[0] for line in gave_way_lines(frame) if line[2:4] in ("a ", "c ")]  # noqa: E731
    orders = [named(two), named(two.iloc[::-1])]
    assert orders[0] == orders[1] == ["| c", "| a", "| a"]
