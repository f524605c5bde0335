"""A run directory a fit created and failed in before writing anything is removed; anything else is kept."""

from __future__ import annotations

import pytest

from andrea_lab.runs.claim import RUN_LOCK_FILE, RunDirectoryError, claim_run_directory, remove_if_unused


def test_a_claimed_directory_holding_only_its_lock_is_removed_while_the_lock_is_held(tmp_path):
    run_dir = tmp_path / "runs" / "quickstart" / "version_0"
    lock = claim_run_directory(run_dir, None)
    remove_if_unused(run_dir)
    lock.release()
    assert not run_dir.exists() and (tmp_path / "runs" / "quickstart").is_dir()


def test_a_directory_with_anything_else_in_it_is_kept(tmp_path):
    run_dir = tmp_path / "version_0"
    lock = claim_run_directory(run_dir, None)
    (run_dir / "config.yaml").write_text("trainer: {}\n")
    remove_if_unused(run_dir)
    lock.release()
    assert sorted(p.name for p in run_dir.iterdir()) == [RUN_LOCK_FILE, "config.yaml"]
    remove_if_unused(None)
    remove_if_unused(tmp_path / "never-made")


def test_a_new_run_is_claimed_only_in_a_fresh_directory(tmp_path):
    """A user's folder named as the run (a logger's version, default_root_dir) is refused (issue 59); the sweep's
    marker and log, written before its fit starts, and a resumed run's own files are not a reason to refuse."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "metrics.csv").write_text("my,own\n")
    with pytest.raises(RunDirectoryError, match="not a fresh run directory: it holds metrics.csv"):
        claim_run_directory(mine, None)
    assert sorted(p.name for p in mine.iterdir()) == ["metrics.csv"]
    swept = tmp_path / "lr1e-3-seed0"
    swept.mkdir()
    (swept / "sweep-run.json").write_text("{}")
    (swept / "sweep.log").write_text("")
    claim_run_directory(swept, None).release()
    (mine / "checkpoints").mkdir()
    (mine / "checkpoints" / "last.ckpt").write_bytes(b"")
    claim_run_directory(mine, str(mine / "checkpoints" / "last.ckpt")).release()
