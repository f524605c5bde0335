"""The sweep benchmark runs both paths end to end at toy size: every phase is reported, runs per hour for
both, and today's fresh-process runs trained exactly as the warm path's did."""

from __future__ import annotations

import json

import pytest

from benchmarks import sweep_throughput

TOY = [
    "model.config.d_model=32",
    "model.config.n_layer=1",
    "model.config.n_head=2",
    "data.batch_size=4",
    "trainer.val_check_interval=3",
    "heldout.max_tokens=2048",
]


@pytest.mark.slow
def test_toy_run_reports_both_paths_and_identical_training(text_corpus, tmp_path, capsys):
    sets = [f"--set={item}" for item in [f"data.corpus={text_corpus}", *TOY]]
    out = tmp_path / "totals.json"
    code = sweep_throughput.main(
        [
            "--steps",
            "3",
            "--variants",
            "pre",
            "--lrs",
            "1e-3",
            "--out",
            str(tmp_path / "runs"),
            "--json",
            str(out),
            *sets,
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    totals = {row["path"]: row for row in json.loads(out.read_text())}
    assert set(totals) == {"today", "improved"}
    for row in totals.values():
        assert row["runs"] == 1 and row["runs_per_hour"] > 0 and row["steps"] > 0 and row["heldout"] > 0
        assert row["same_training"] is True
    assert "runs_per_hour, improved / today:" in printed and "runs_per_hour_same_steps" in printed
    assert "train/loss curve and held-out loss identical" in printed
    assert "every rung side by side" in printed  # one rung, but today's path beside another: the matmul share


def test_the_shares_are_of_every_job_slot_not_of_wall_time_alone(capsys):
    import argparse

    row = {"path": "improved", "run": "pre lr=1e-3 seed=0", "total": 50.0, "step_count": 250}
    phases = {"startup": 1.0, "steps": 40.0, "validation": 1.0, "other": 1.0, "heldout": 7.0, "teardown": 0.0}
    runs = [{**row, **phases, "run": f"run {i}", "train_loss_curve": [1.0], "heldout_loss": 2.0} for i in range(2)]
    two_at_once = sweep_throughput.report({"improved": {"runs": runs, "wall_s": 50.0}}, argparse.Namespace(jobs=2))
    assert two_at_once.loc["improved", "steps_share"] == pytest.approx(0.8)  # 80 s of steps in 2 x 50 s of slots
    assert two_at_once.loc["improved", "heldout_share"] == pytest.approx(0.14)
    assert "x 2 job(s)" in capsys.readouterr().out


def test_paths_of_other_arithmetic_are_compared_by_held_out_loss_not_bit_for_bit(capsys):
    row = {"run": "pre lr=1e-3 seed=0", "train_loss_curve": [5.0, 4.0]}
    runs = sweep_throughput.pd.DataFrame(
        [
            {**row, "path": "today", "arithmetic": "32-true", "heldout_loss": 2.0},
            {**row, "path": "improved", "arithmetic": "32-true", "heldout_loss": 2.0},
            {**row, "path": "fastest", "arithmetic": "bf16-mixed", "train_loss_curve": [5.1], "heldout_loss": 2.01},
        ]
    )
    assert bool(sweep_throughput.same_training(runs)) is True
    printed = capsys.readouterr().out
    assert "today vs improved: train/loss curve and held-out loss identical" in printed
    assert "today (32-true) vs fastest (bf16-mixed): held-out loss 2.0 vs 2.01" in printed
    runs.loc[1, "heldout_loss"] = 2.5
    assert bool(sweep_throughput.same_training(runs)) is False


def test_the_same_steps_rate_pools_step_time_only_within_one_arithmetic():
    totals = sweep_throughput.pd.DataFrame(
        {"steps": [30.0, 50.0, 14.0], "sweep_wall": [100.0, 90.0, 30.0], "runs": [1, 1, 1]},
        index=["today", "improved", "fastest"],
    )
    arithmetic = sweep_throughput.pd.Series(["32-true", "32-true", "bf16-mixed"], index=totals.index)
    sweep_throughput.add_same_steps_rate(totals, arithmetic)
    assert list(totals["runs_per_hour_same_steps"]) == pytest.approx([3600 / 110, 3600 / 80, 3600 / 30])
