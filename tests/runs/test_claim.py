"""A run directory a fit created and failed in before writing anything is removed; anything else is kept."""

from __future__ import annotations

from andrea_lab.runs.claim import RUN_LOCK_FILE, claim_run_directory, remove_if_unused


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
