"""Effects in steps: where a curve first reaches a target (linear between fixed evaluations), per seed at
the LRs chosen on the other seeds, with the never-reached seeds said and no interval then; the section in
the report and the columns in runs.csv."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from andrea_lab.experiments.compare import compare
from andrea_lab.experiments.compare.runs_table import load_runs, read_runs_csv, write_runs_csv
from andrea_lab.experiments.compare.steps import StepsEffect, curve_of, steps_rows, steps_to_reach
from andrea_lab.runs.directory import DONE_MARKER, START_MARKER, HeldOut, RunRecord, run_version, write_record


def test_steps_to_reach_interpolates_between_evaluations():
    curve = [(100, 3.0), (200, 2.5), (300, 2.0)]
    assert steps_to_reach(curve, 2.25) == pytest.approx(250.0)
    assert steps_to_reach(curve, 2.5) == 200.0
    assert steps_to_reach(curve, 3.5) == 100.0, "below the target at the first evaluation: that step"
    assert steps_to_reach(curve, 1.9) is None


def test_a_curve_is_the_fixed_evaluations_then_the_final_loss():
    row = {"heldout_at_200": 2.5, "heldout_at_100": 3.0, "heldout_at_300": float("nan"), "steps": 300}
    assert curve_of({**row, "heldout_loss": 2.1}, "heldout_loss") == [(100, 3.0), (200, 2.5), (300, 2.1)]
    assert curve_of({**row, "heldout_loss": None}, "heldout_loss") == [(100, 3.0), (200, 2.5)]


def test_the_share_of_steps_has_an_interval_only_when_every_seed_reached():
    assert StepsEffect("a", "b", {0: 0.7, 1: 0.8, 2: 0.75}).describe() == "75.0% of b's steps [62.6%, 87.4%], n=3"
    never = "1 of 2 seeds never reach it (reached: 70.0%); no interval"
    assert StepsEffect("a", "b", {0: 0.7, 1: None}).describe() == never
    assert StepsEffect("a", "b", {}).describe() == "no seed with a curve on both sides"


def _write(root: Path, variant: str, lr: float, seed: int, curve: dict[int, float], index: int) -> None:
    run_dir = root / "opt" / variant / run_version(lr, seed)
    run_dir.mkdir(parents=True)
    (run_dir / DONE_MARKER).write_text('{"status": "finished"}')
    final = curve[max(curve)]
    write_record(
        run_dir,
        RunRecord(
            status="finished",
            initial_val_loss=5.5,
            final_val_loss=final,
            lr=lr,
            seed=seed,
            steps=max(curve),
            heldout=HeldOut(final, 0.01, 1000, 10, 10, 1000, False, "document", 0, 1000, final / math.log(2)),
            heldout_curve=[{"step": s, "loss": v, "se": 0.01} for s, v in sorted(curve.items()) if s < max(curve)],
            training={"warmup_steps": 10},
        ),
    )
    start = {"suite": "opt", "variant": variant, "lr": lr, "seed": seed, "variant_index": index}
    (run_dir / START_MARKER).write_text(json.dumps(start))


@pytest.fixture
def runs(tmp_path):
    """muon reaches adamw's final loss (2.0) between its steps 200 and 300, at 2.25 / 1.75 → step 250:
    62.5 % of adamw's 400 steps on every seed; adamw never reaches muon's final (1.6)."""
    root = tmp_path / "runs"
    for seed in range(3):
        for lr, worse in ((1e-3, 0.3), (3e-3, 0.0)):
            _write(root, "adamw", lr, seed, {100: 3.0, 200: 2.6, 300: 2.3, 400: 2.0 + worse + seed / 1000}, 0)
            _write(root, "muon", lr, seed, {100: 2.6, 200: 2.25, 300: 1.75, 400: 1.6 + worse}, 1)
    return load_runs(root, events=False)


def test_compare_reports_steps_both_ways_and_runs_csv_keeps_the_curve(runs, tmp_path):
    variants = compare.build_variants(runs, "adamw")
    (row,) = steps_rows(variants, compare.HELDOUT)
    assert row["variant"] == "muon"
    shares = row["variant_reaches_reference"]
    assert shares.startswith("62.5% of adamw's steps [") and shares.endswith("n=3"), shares
    assert row["reference_reaches_variant"] == "3 of 3 seeds never reach it (reached: none); no interval"
    write_runs_csv(runs, tmp_path / "runs.csv")
    again = read_runs_csv(tmp_path / "runs.csv")
    assert [c for c in again.columns if c.startswith("heldout_at_")] == [
        "heldout_at_100",
        "heldout_at_200",
        "heldout_at_300",
    ]
    assert steps_rows(compare.build_variants(again, "adamw"), compare.HELDOUT) == [row]
    assert not math.isnan(pd.to_numeric(again["heldout_at_300"]).max())


def test_bits_per_byte_reach_the_variant_table_and_runs_csv(runs, tmp_path):
    """Byte-level runs score 1 byte per token: bits per byte = nats / ln 2, at each variant's best LR."""
    frame = compare.variant_table(compare.build_variants(runs, "adamw"))
    adamw = frame.set_index("variant").loc["adamw"]
    assert adamw["best_lr"] == 3e-3 and adamw["bits_per_byte"] == pytest.approx(2.001 / math.log(2), abs=1e-6)
    write_runs_csv(runs, tmp_path / "runs.csv")
    assert read_runs_csv(tmp_path / "runs.csv")["heldout_bits_per_byte"].notna().all()
    older = runs.drop(columns=["heldout_bits_per_byte"])  # runs recorded before it was kept: no column at all
    assert "bits_per_byte" not in compare.variant_table(compare.build_variants(older, "adamw"))
