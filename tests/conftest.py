"""Shared fixtures: a small real-text corpus and an isolated cache, so tests never touch ~/.cache."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

#: Overrides that turn experiments/quickstart.yaml into a seconds-long CPU run on a small corpus.
MICRO_OVERRIDES = [
    "--model.config.vocab_size", "257", "--data.tokenizer", "byte",
    "--model.config.d_model", "64", "--model.config.n_layer", "2", "--model.config.n_head", "2",
    "--model.config.block_size", "64", "--data.batch_size", "8",
    "--trainer.limit_val_batches", "2", "--trainer.num_sanity_val_steps", "2",
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path_factory.getbasetemp() / "andrea-cache"))


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory) -> Path:
    """About 200 KB of real Python source (a few standard-library modules) as a corpus directory."""
    root = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse.py", "textwrap.py", "string.py", "heapq.py", "bisect.py", "shlex.py"):
        (root / name).write_text((stdlib / name).read_text(encoding="utf-8"), encoding="utf-8")
    return root
