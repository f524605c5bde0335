"""A 2-process DDP fit on the CPU (gloo): runs end to end, each rank reads a disjoint share of every
global batch, and its validation-loss curve matches a single process with the same global batch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from andrea_testing import MICRO_OVERRIDES
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")
#: Tolerance on the validation loss: same samples and same averaged gradients, so only the order
#: of floating-point reductions differs (all-reduce vs one batch).
TOLERANCE = 2e-3


def fit(save_dir: Path, corpus: Path, name: str, *extra: str) -> Path:
    command = [
        sys.executable,
        "-m",
        "andrea_lab.cli",
        "fit",
        "--config",
        QUICKSTART,
        *MICRO_OVERRIDES,
        "--data.corpus",
        str(corpus),
        "--trainer.logger.init_args.save_dir",
        str(save_dir),
        "--trainer.logger.init_args.name",
        name,
        "--trainer.max_steps",
        "20",
        "--trainer.val_check_interval",
        "10",
        "--model.lr",
        "3e-3",
        "--model.warmup_steps",
        "2",
        *extra,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return save_dir / name / "version_0"


def val_losses(run_dir: Path) -> dict[int, float]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {e.step: e.value for e in events.Scalars("val/loss")}


@pytest.mark.slow
def test_two_process_ddp_matches_one_process_with_the_same_global_batch(tmp_path, text_corpus):
    single = fit(tmp_path, text_corpus, "single", "--data.batch_size", "8")
    # Validation is not sharded: every rank scores the same windows, so twice the batches of half
    # the size cover exactly the single process's validation windows.
    ddp = fit(
        tmp_path,
        text_corpus,
        "ddp",
        "--data.batch_size",
        "4",
        "--trainer.limit_val_batches",
        "4",
        "--trainer.num_sanity_val_steps",
        "4",
        "--trainer.strategy",
        "ddp",
        "--trainer.devices",
        "2",
        "--trainer.accelerator",
        "cpu",
    )
    expected, got = val_losses(single), val_losses(ddp)
    assert sorted(got) == sorted(expected) and len(expected) >= 3
    for step in expected:
        assert got[step] == pytest.approx(expected[step], abs=TOLERANCE), f"step {step}"
    assert expected[max(expected)] < expected[0] - 0.5  # it trained
