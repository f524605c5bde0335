"""Decision accuracy of a ladder on constructed rungs whose true accuracy is known (issue 54)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from andrea_lab.experiments.compare import ladder, stats

LRS = (1e-3, 3e-3, 1e-2)
SEEDS = (0, 1, 2, 3, 4)
DECISIONS = [ladder.Decision(name, "ref") for name in ("a", "b", "c", "d")]
COMPUTE = {"r0": 1e12, "r1": 4e12, "top": 3e13}


def _rows(rung: str, variant: str, base: float, curvature: float, noise: float, diverge_top: bool = False) -> list:
    """A variant's runs at a rung: ``base`` at the middle LR (its best), ``curvature`` more at each end (its LR
    sensitivity is 2/3 of it), plus a seed-specific ``noise`` shift (seed s: noise * (s - 2))."""
    rows = []
    for index, lr in enumerate(LRS):
        for seed in SEEDS:
            loss = base + curvature * (index - 1) ** 2 + noise * (seed - 2)
            diverged = diverge_top and index == len(LRS) - 1
            rows.append(
                dict(
                    variant=variant,
                    lr=lr,
                    seed=seed,
                    status="diverged" if diverged else "finished",
                    heldout_loss=math.nan if diverged else loss,
                    initial_val_loss=5.5,
                    divergence_kind="nonfinite" if diverged else None,
                    scale=rung,
                    scale_index=list(COMPUTE).index(rung),
                )
            )
    return rows


def _ladder(effects: dict[str, tuple[float, ...]], noise: float = 0.0) -> pd.DataFrame:
    """Rungs where decision i's loss effect (A − ref) is ``effects[rung][i]``; every A has a flatter LR curve
    than ref (sensitivity decisions all agree) and trains at the top LR where ref diverges (ceiling too)."""
    rows = []
    for rung, values in effects.items():
        rows += _rows(rung, "ref", 2.0, 0.3, noise, diverge_top=True)
        for decision, effect in zip(DECISIONS, values):
            rows += _rows(rung, decision.a, 2.0 + effect, 0.1, noise)
    return pd.DataFrame(rows)


def _table(runs: pd.DataFrame, **kwargs) -> pd.DataFrame:
    return ladder.decision_accuracy(runs, list(COMPUTE), DECISIONS, COMPUTE, **kwargs).set_index(["rung", "kind"])


def test_three_of_four_flipped_decisions_give_accuracy_one_quarter():
    runs = _ladder({"r0": (0.1, 0.1, 0.1, -0.1), "r1": (-0.1, -0.1, -0.1, -0.1), "top": (-0.2,) * 4})
    table = _table(runs)
    assert table.loc[("r0", "loss"), "accuracy"] == 0.25 and table.loc[("r0", "loss"), "decisions"] == 4
    assert table.loc[("r1", "loss"), "accuracy"] == 1.0
    # Seed noise is the same for every variant, so every per-seed effect equals the mean: no resample moves it.
    assert (table.loc[("r0", "loss"), "low"], table.loc[("r0", "loss"), "high"]) == (0.25, 0.25)
    for kind in ("lr_sensitivity", "highest_lr"):
        assert table.loc[("r0", kind), "accuracy"] == 1.0 and table.loc[("r0", kind), "decisions"] == 4
    assert table.loc[("r0", "loss"), "compute_ratio"] == pytest.approx(1 / 30)
    assert table.loc[("top", "loss"), "status"] == "top" and math.isnan(table.loc[("top", "loss"), "accuracy"])


def test_bootstrap_interval_covers_the_estimate_and_widens_when_seeds_disagree():
    rows = _ladder({"r0": (0.1, 0.1, -0.1, -0.1), "r1": (-0.1,) * 4, "top": (-0.2,) * 4})
    # Decision d at r0: seeds split around 0 (mean -0.02), so its sign is uncertain under resampling.
    d_rows = (rows["variant"] == "d") & (rows["scale"] == "r0")
    rows.loc[d_rows, "heldout_loss"] += np.where(rows.loc[d_rows, "seed"] < 2, 0.2, -0.1)
    table = _table(rows)
    row = table.loc[("r0", "loss")]
    assert row["accuracy"] == 0.5
    assert row["low"] <= 0.25 and row["high"] >= 0.5 and row["high"] - row["low"] > 0
    assert table.loc[("r1", "loss"), "low"] == table.loc[("r1", "loss"), "high"] == 1.0


def test_a_rung_still_running_is_missing_never_a_partial_accuracy():
    runs = _ladder({"r0": (0.1,) * 4, "r1": (-0.1,) * 4, "top": (-0.2,) * 4})
    runs.loc[(runs["scale"] == "r1") & (runs["seed"] == 4), "status"] = "running"
    table = _table(runs)
    assert table.loc[("r1", "loss"), "status"] == ladder.MISSING and math.isnan(table.loc[("r1", "loss"), "accuracy"])
    assert table.loc[("r0", "loss"), "accuracy"] == 0.0
    # Fewer runs than planned: the rung is missing too, though every run present has ended.
    planned = {"r0": {"a": len(LRS) * len(SEEDS) * 5}}
    assert _table(runs[runs["scale"] != "r1"], planned=planned).loc[("r0", "loss"), "status"] == ladder.MISSING


def test_a_variant_planned_after_its_rung_ran_leaves_the_rung_missing_whatever_the_run_count():
    """The ladder gained a variant after its lower rungs ran; their grid extensions had added more runs than the
    new variant plans, so a count per rung would call the rung finished without the variant."""
    runs = _ladder({"r0": (0.1,) * 4, "r1": (-0.1,) * 4, "top": (-0.2,) * 4})
    extended = pd.DataFrame(
        [{**row, "lr": row["lr"] * 100} for rung in COMPUTE for row in _rows(rung, "a", 2.1, 0.1, 0.0)]
    )
    runs = pd.concat([runs, extended], ignore_index=True)  # a: three more LRs at every rung (extended)
    per_variant = len(LRS) * len(SEEDS)
    planned = ladder.planned_cells(
        [
            (rung, variant)
            for rung in COMPUTE
            for variant in ("ref", "a", "b", "c", "d", "new")
            for _ in range(per_variant)
        ]
    )
    assert len(runs[runs["scale"] == "r0"]) >= sum(planned["r0"].values())  # enough runs by the rung's count
    table = _table(runs, planned=planned)
    assert (table.xs("loss", level="kind")["status"] == ladder.MISSING).all()
    new = pd.DataFrame(_rows("r0", "new", 2.0, 0.1, 0.0))
    assert (
        _table(pd.concat([runs, new], ignore_index=True), planned=planned).loc[("r0", "loss"), "status"]
        != ladder.MISSING
    )


def test_without_the_top_rung_no_accuracy_is_given():
    runs = _ladder({"r0": (0.1,) * 4, "r1": (-0.1,) * 4})
    table = _table(runs)
    assert table["accuracy"].isna().all()
    assert table.loc[("r0", "loss"), "status"] == "finished; top rung missing"
    assert table.loc[("top", "loss"), "status"] == ladder.MISSING


def test_markdown_has_one_row_per_rung():
    runs = _ladder({"r0": (0.1, 0.1, 0.1, -0.1), "r1": (-0.1,) * 4, "top": (-0.2,) * 4})
    text = ladder.accuracy_markdown(ladder.decision_accuracy(runs, list(COMPUTE), DECISIONS, COMPUTE))
    lines = text.splitlines()
    assert len(lines) == 2 + len(COMPUTE)
    assert lines[2].startswith("| r0 | 1e+12 | 0.0333 | 0.25 [0.25, 0.25] of 4 | 1.00 [1.00, 1.00] of 4 |")


def test_the_figure_draws_one_line_per_kind_and_leaves_out_rungs_without_an_accuracy():
    from andrea_lab.experiments.compare.plots_ladder import accuracy_figure

    runs = _ladder({"r0": (0.1, 0.1, 0.1, -0.1), "r1": (-0.1,) * 4, "top": (-0.2,) * 4})
    runs.loc[(runs["scale"] == "r1") & (runs["seed"] == 4), "status"] = "running"
    figure = accuracy_figure(ladder.decision_accuracy(runs, list(COMPUTE), DECISIONS, COMPUTE))
    bars = figure.axes[0].containers  # one errorbar container per kind, labelled
    assert [bar.get_label() for bar in bars] == list(ladder.KINDS)
    assert list(bars[0].lines[0].get_xdata()) == [pytest.approx(1 / 30)]  # r1 missing, the top has no accuracy


def test_the_highest_lr_that_trains_is_read_on_the_shared_lrs_and_censored_when_neither_gave_way():
    """A grid extended for one variant (or a per-variant top bracket) must not make it look more stable: the
    ceiling is read on the LRs both ran, and a seed where neither diverged there has no value (not a tie)."""
    rows = pd.DataFrame(_rows("r0", "ref", 2.0, 0.3, 0.0) + _rows("r0", "a", 2.0, 0.1, 0.0))
    extended = pd.DataFrame(_rows("r0", "a", 2.0, 0.1, 0.0)).assign(lr=lambda f: f["lr"] * 100)  # a's grid only
    runs = stats.counted_runs(pd.concat([rows, extended], ignore_index=True), "heldout_loss")
    decision = ladder.Decision("a", "ref")
    assert ladder.ceiling_effects(runs, decision, list(SEEDS)) == {}  # nobody diverged on the shared LRs
    gave_way = pd.DataFrame(_rows("r0", "ref", 2.0, 0.3, 0.0, diverge_top=True) + _rows("r0", "a", 2.0, 0.1, 0.0))
    counted = stats.counted_runs(pd.concat([gave_way, extended], ignore_index=True), "heldout_loss")
    # ref gives way at 1e-2, a trains there: a's ceiling is 1e-2 (its own 1e-1..1 do not count), ref's 3e-3.
    effects = ladder.ceiling_effects(counted, decision, list(SEEDS))
    assert effects == {seed: pytest.approx(math.log10(1e-2) - math.log10(3e-3)) for seed in SEEDS}


def test_lr_sensitivity_is_compared_on_the_lrs_both_ran_when_one_grid_was_extended():
    """a's grid extended by three LRs that a trains badly at: on the shared grid a is still the flatter one,
    so the extension does not turn the decision over (nor drop it, as an exact-grid rule did)."""
    rows = _rows("r0", "ref", 2.0, 0.3, 0.0) + _rows("r0", "a", 2.0, 0.1, 0.0)
    extended = pd.DataFrame(_rows("r0", "a", 2.0, 0.1, 0.0)).assign(lr=lambda f: f["lr"] * 100, heldout_loss=4.0)
    runs = stats.counted_runs(pd.concat([pd.DataFrame(rows), extended], ignore_index=True), "heldout_loss")
    effects = ladder.decision_effects(runs, ladder.Decision("a", "ref"))["lr_sensitivity"]
    assert effects == {seed: pytest.approx((0.1 - 0.3) * 2 / 3) for seed in SEEDS}
