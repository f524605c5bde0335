"""A briefly trained tiny checkpoint, written by a real `andrea fit`, for the commands that read one."""

from __future__ import annotations

from pathlib import Path

import pytest
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def trained_micro_run(tmp_path_factory) -> Path:
    """The run directory of a 40-step fit of the micro model (byte tokenizer) on one repeated sentence:
    after 40 steps its greedy continuations are varied words with clear winners (a model trained that
    briefly on real text only continues with spaces). Its checkpoint is ``checkpoints/last.ckpt``."""
    root = tmp_path_factory.mktemp("trained-micro")
    corpus = root / "pangram.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog; " * 2000, encoding="utf-8")
    status = main(
        [
            "fit",
            "--config",
            str(REPO / "experiments/quickstart.yaml"),
            *MICRO_OVERRIDES,
            "--data.corpus",
            str(corpus),
            "--data.cache_dir",
            str(root / "cache"),
            "--trainer.logger.init_args.save_dir",
            str(root / "runs"),
            "--model.lr",
            "5e-3",
            "--model.warmup_steps",
            "5",
            "--trainer.max_steps",
            "40",
            "--trainer.val_check_interval",
            "20",
            "--heldout.max_tokens",
            "4096",
        ]
    )
    assert status == 0
    return root / "runs" / "quickstart" / "version_0"
