"""A ladder's prediction written from the lower rungs, refused when edited or committed late, scored (issue 54)."""

from __future__ import annotations

import math
import subprocess
from datetime import timedelta

import pandas as pd
import pytest

from andrea_lab.experiments.compare import ladder_predictions as predictions
from andrea_lab.experiments.compare.ladder import Decision

LRS = (1e-3, 3e-3, 1e-2)
SEEDS = (0, 1, 2)
COMPUTE = {"r0": 1e12, "r1": 3e12, "r2": 1e13, "top": 1e14}
DECISIONS = [Decision("a", "b")]


def _loss(variant: str, compute: float) -> float:
    """b follows 1.5 + 2 (C/1e12)^-0.4; a is 0.1 worse at 1e12 and the gap closes by 0.02 per decade."""
    decades = math.log10(compute / 1e12)
    b = 1.5 + 2.0 * 10 ** (-0.4 * decades)
    return b + (0.1 - 0.02 * decades if variant == "a" else 0.0)


def _runs(rungs) -> pd.DataFrame:
    rows = []
    for index, rung in enumerate(rungs):
        for variant in ("a", "b"):
            for k, lr in enumerate(LRS):
                for seed in SEEDS:
                    loss = _loss(variant, COMPUTE[rung]) + 0.05 * (k - 1) ** 2 + 0.001 * (seed - 1)
                    rows.append(
                        dict(variant=variant, lr=lr, seed=seed, status="finished", heldout_loss=loss,
                             initial_val_loss=5.5, divergence_kind=None, scale=rung, scale_index=index)
                    )  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture
def prediction():
    return predictions.make_prediction(_runs(["r0", "r1", "r2"]), ["r0", "r1", "r2"], COMPUTE, DECISIONS, "top", "lad")


def test_prediction_from_lower_rungs_extrapolates_the_trends(prediction):
    assert prediction["variants"]["b"]["value"] == pytest.approx(_loss("b", 1e14), abs=0.02)
    effect = prediction["decisions"]["a vs b"]
    assert effect["value"] == pytest.approx(0.1 - 0.02 * 2, abs=0.01) and effect["se"] is not None


def test_scored_against_the_top_rung(prediction):
    top = _runs(["top"])
    top.loc[top["variant"] == "a", "heldout_loss"] -= 0.1  # at the top a ends up 0.1 ahead of the trend: sign flips
    losses, effects, best_lrs = predictions.measured(top, "top", DECISIONS)
    table = predictions.score(prediction, losses, effects, best_lrs).set_index(["kind", "name"])
    assert table.loc[("loss", "b"), "error"] == pytest.approx(_loss("b", 1e14) - prediction["variants"]["b"]["value"])
    assert abs(table.loc[("loss", "b"), "error"]) < 0.02
    assert effects["a vs b"] == pytest.approx(0.06 - 0.1, abs=1e-9)  # predicted about +0.06: a behind
    assert table.loc[("effect", "a vs b"), "predicted"] > 0 and not table.loc[("effect", "a vs b"), "sign_right"]
    assert table.loc[("effect", "a vs b"), "error"] == pytest.approx(
        effects["a vs b"] - table.loc[("effect", "a vs b"), "predicted"]
    )


def test_each_variants_best_lr_is_extrapolated_and_scored_in_decades():
    """b's optimum moves one LR-grid step down per rung (1e-2, 3e-3, 1e-3 at 1e12, 3e12, 1e13): about a decade
    per decade of compute, so the trend puts it near 1e-4 at 1e14; a's stays at 3e-3."""
    runs = _runs(["r0", "r1", "r2"])
    for index, rung in enumerate(["r0", "r1", "r2"]):
        rows = (runs["variant"] == "b") & (runs["scale"] == rung)
        best = LRS[2 - index]
        runs.loc[rows, "heldout_loss"] = _loss("b", COMPUTE[rung]) + 0.05 * (runs.loc[rows, "lr"] != best)
    made = predictions.make_prediction(runs, ["r0", "r1", "r2"], COMPUTE, DECISIONS, "top", "lad")
    # a's neighbours of 3e-3 are equally worse: the parabola's vertex is the middle of log10 1e-3 and 1e-2.
    assert made["log10_best_lrs"]["a"]["value"] == pytest.approx(-2.5)
    assert made["log10_best_lrs"]["b"]["value"] == pytest.approx(-4.0, abs=0.15)
    top = _runs(["top"])  # at the top both are best near 3e-3: b's prediction was off by about 1.5 decades
    table = predictions.score(made, *predictions.measured(top, "top", DECISIONS)).set_index(["kind", "name"])
    row = table.loc[("log10_best_lr", "b")]
    assert row["actual"] == pytest.approx(-2.5) and row["error"] == pytest.approx(row["actual"] - row["predicted"])


def test_a_prediction_is_written_once_and_refused_when_edited(tmp_path, prediction):
    path = tmp_path / "prediction.json"
    digest = predictions.write_prediction(path, prediction)
    assert predictions.read_checked(path, digest, None)["top_rung"] == "top"
    with pytest.raises(predictions.PredictionError, match="exists; a prediction is written once"):
        predictions.write_prediction(path, prediction)
    path.write_text(path.read_text().replace('"top"', '"top" '))
    with pytest.raises(predictions.PredictionError, match="not the .* recorded: it changed after"):
        predictions.read_checked(path, digest, None)


def test_a_prediction_committed_after_the_top_rung_started_is_refused(tmp_path, prediction):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    path = tmp_path / "prediction.json"
    digest = predictions.write_prediction(path, prediction)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "add", path.name], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "prediction"], cwd=tmp_path, check=True)
    committed = predictions.committed_at(path)
    assert committed is not None
    assert predictions.read_checked(path, digest, committed + timedelta(minutes=1))["suite"] == "lad"
    with pytest.raises(predictions.PredictionError, match="after the top rung's first run started"):
        predictions.read_checked(path, digest, committed - timedelta(minutes=1))
    untracked = tmp_path / "untracked.json"
    untracked.write_text("{}")
    assert predictions.committed_at(untracked) is None


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000 + "]" * 100_000])
def test_a_damaged_prediction_file_is_one_line_not_a_traceback(tmp_path, text):
    path = tmp_path / "prediction.json"
    path.write_text(text)
    with pytest.raises(predictions.PredictionError, match="prediction.json"):
        predictions.read_checked(path, predictions.sha256_of(path), None)


def test_a_prediction_file_that_is_a_fifo_or_a_device_is_refused_without_waiting(tmp_path):
    import os

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        with pytest.raises(predictions.PredictionError, match="not a regular file|does not exist"):
            predictions.read_checked(path, "0" * 64, None)
