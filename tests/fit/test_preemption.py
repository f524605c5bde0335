"""Preemption: a signal between the micro-batches of a gradient accumulation stops the fit at the end of
that optimizer step with a checkpoint, exit status 4 and the resume command; `andrea fit --resume`
continues in the same directory and logs exactly the losses of a fit never interrupted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from andrea_testing import MICRO_OVERRIDES
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from andrea_lab.errors import PreemptedError
from andrea_lab.runs.checkpoint_io import load_checkpoint

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "experiments" / "quickstart.yaml")
ANDREA = [sys.executable, "-m", "andrea_lab.cli"]


def fit_args(save_dir: Path, corpus: Path, max_steps: int) -> list[str]:
    return [
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
        "--trainer.accumulate_grad_batches",
        "2",
        "--model.decay_steps",
        "100",
        "--model.warmup_steps",
        "3",
        "--model.config.dropout",
        "0.1",
        "--trainer.limit_val_batches",
        "0",
        "--trainer.log_every_n_steps",
        "1",
        "--trainer.deterministic",
        "true",
        "--checkpoint.monitor",
        "null",
    ]


def andrea(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANDREA_LAB_CACHE": str(cache), "PYTHONPATH": str(Path(__file__).parent)}
    return subprocess.run([*ANDREA, *args], capture_output=True, text=True, timeout=600, env=env)


def train_losses(run_dir: Path) -> dict[int, float]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {e.step: e.value for e in events.Scalars("train/loss")}


def preempt(runs: Path, corpus: Path, cache: Path, signum: str) -> Path:
    """A fit that signals itself at batch index 4, the first micro-batch of optimizer step 3 (two micro-batches
    per step): the signal lands mid-step. Checks the exit and returns the run directory."""
    signal_at = json.dumps(
        [{"class_path": "preemption_helpers.SignalAtBatch", "init_args": {"batch_idx": 4, "signum": signum}}]
    )
    victim = andrea([*fit_args(runs, corpus, 1000), "--trainer.callbacks", signal_at], cache)
    run_dir = runs / "quickstart" / "version_0"
    checkpoint = run_dir / "checkpoints" / "preempted.ckpt"
    assert victim.returncode == PreemptedError.exit_status, victim.stderr
    assert f"stopped by {signum} after step 3; checkpoint written: {checkpoint}" in victim.stderr
    assert f"resume with: andrea fit --resume {run_dir}" in victim.stderr
    assert "Traceback" not in victim.stderr
    assert "weights_only" not in victim.stderr, "Lightning's default-weights_only line is silenced (issue 60)"
    assert load_checkpoint(checkpoint)["global_step"] == 3, "the step in progress was finished, then saved"
    assert Path(f"{checkpoint}.sha256.json").is_file(), "written through the atomic checkpoint IO"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    return run_dir


@pytest.mark.slow
def test_sigusr1_stops_the_same_way(tmp_path, text_corpus):
    preempt(tmp_path / "runs", text_corpus, tmp_path / "cache", "SIGUSR1")


@pytest.mark.slow
def test_sigterm_mid_accumulation_checkpoints_the_step_and_resumes_exactly(tmp_path, text_corpus):
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    reference = andrea([*fit_args(runs, text_corpus, 12), "--trainer.logger.init_args.name", "reference"], cache)
    assert reference.returncode == 0, reference.stderr
    run_dir = preempt(runs, text_corpus, cache, "SIGTERM")

    resumed = andrea(["fit", "--resume", str(run_dir), "--trainer.max_steps", "12", "--trainer.callbacks", "[]"], cache)
    assert resumed.returncode == 0, resumed.stderr
    assert not (runs / "quickstart" / "version_1").exists(), "resumed in the run's own directory"
    expected, got = train_losses(runs / "reference" / "version_0"), train_losses(run_dir)
    assert sorted(got) == sorted(expected) == list(range(12))
    assert [got[step] for step in range(12)] == [expected[step] for step in range(12)]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"


def test_resume_needs_a_run_directory(tmp_path, capsys):
    from andrea_lab.cli import main

    assert main(["fit", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--resume {tmp_path}: not a run directory" in err and "Traceback" not in err


def test_an_unknown_signal_name_is_a_usage_error():
    from andrea_lab.errors import UsageError
    from andrea_lab.fit import PreemptionCheckpoint

    with pytest.raises(UsageError, match="preemption.signals: 'SIGNOPE' is not a signal here; e.g. SIGTERM, SIGUSR1"):
        PreemptionCheckpoint(signals=("SIGNOPE",))


@pytest.mark.slow
def test_sigterm_right_after_a_validation_resumes_with_the_curve_at_its_steps(tmp_path, text_corpus):
    """The SIGTERM lands as the validation after step 4 ends (no accumulation): the preemption checkpoint is
    written after Lightning counted that step for its logger, which it counts once more when it restores.
    The resumed run logs every loss at the step an uninterrupted run logs it."""
    runs, cache = tmp_path / "runs", tmp_path / "cache"

    def args(max_steps: int) -> list[str]:
        validate_every_4 = ["--trainer.val_check_interval", "4", "--trainer.check_val_every_n_epoch", "null"]
        no_accumulation = ["--trainer.accumulate_grad_batches", "1", "--trainer.limit_val_batches", "1"]
        return [*fit_args(runs, text_corpus, max_steps), *no_accumulation, *validate_every_4]

    reference = andrea([*args(12), "--trainer.logger.init_args.name", "reference"], cache)
    assert reference.returncode == 0, reference.stderr
    signal_at = json.dumps([{"class_path": "preemption_helpers.SignalAfterValidation", "init_args": {"step": 4}}])
    victim = andrea([*args(1000), "--trainer.callbacks", signal_at], cache)
    assert victim.returncode == PreemptedError.exit_status, victim.stderr
    run_dir = runs / "quickstart" / "version_0"
    resumed = andrea(["fit", "--resume", str(run_dir), "--trainer.max_steps", "12", "--trainer.callbacks", "[]"], cache)
    assert resumed.returncode == 0, resumed.stderr
    expected, got = train_losses(runs / "reference" / "version_0"), train_losses(run_dir)
    assert sorted(got) == sorted(expected) == list(range(12))
    assert [got[step] for step in range(12)] == [expected[step] for step in range(12)]
