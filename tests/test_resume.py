"""Exact resume: a fit killed with SIGKILL and resumed from its last checkpoint logs the same training
losses, step for step, as a fit that was never interrupted (data position, RNG, optimizer, LR schedule)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from andrea_testing import MICRO_OVERRIDES
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")


def fit_command(save_dir: Path, corpus: Path, max_steps: int, *extra: str) -> list[str]:
    return [
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
        "--trainer.max_steps",
        str(max_steps),
        "--model.decay_steps",
        "100",
        "--model.warmup_steps",
        "5",
        "--model.config.dropout",
        "0.1",  # so that the RNG state matters too
        "--trainer.limit_val_batches",
        "0",
        "--trainer.log_every_n_steps",
        "1",
        "--trainer.deterministic",
        "true",
        "--checkpoint.monitor",
        "null",
        "--checkpoint.save_top_k",
        "-1",
        "--checkpoint.every_n_train_steps",
        "10",
        "--checkpoint.filename",
        "step{step}",
        *extra,
    ]


def run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"


def train_losses(run_dir: Path) -> dict[int, float]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {e.step: e.value for e in events.Scalars("train/loss")}


#: Every built-in optimizer: its state (moments, Muon's momentum, schedule-free's average and counters) and its
#: schedule's position must come back exactly.
OPTIMIZERS = ["adamw", "adamw_independent_wd", "muon", "lion", "schedule_free"]


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_killed_fit_resumes_with_identical_losses(tmp_path, text_corpus, optimizer):
    runs = tmp_path / "runs"
    chosen = ("--model.optimizer", optimizer)
    run(fit_command(runs, text_corpus, 40, *chosen))
    reference = runs / "quickstart" / "version_0"

    # The same fit, with no step limit in sight, killed (SIGKILL) once its step-10 checkpoint is complete.
    victim = subprocess.Popen(
        fit_command(runs, text_corpus, 100_000, *chosen),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed_dir = runs / "quickstart" / "version_1"
    manifest = killed_dir / "checkpoints" / "step10.ckpt.sha256.json"
    deadline = time.monotonic() + 600
    while not manifest.exists():
        assert victim.poll() is None, "the fit ended before it could be killed"
        assert time.monotonic() < deadline, "no step-10 checkpoint appeared"
        time.sleep(0.02)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL

    checkpoint = killed_dir / "checkpoints" / "step10.ckpt"
    run(fit_command(runs, text_corpus, 40, *chosen, "--ckpt_path", str(checkpoint)))
    resumed = runs / "quickstart" / "version_2"  # a new directory: nothing of the killed run is overwritten

    expected, got = train_losses(reference), train_losses(resumed)
    later = sorted(step for step in expected if step >= 10)
    assert len(later) >= 25
    assert [got.get(step) for step in later] == [expected[step] for step in later]
    assert checkpoint.is_file()
