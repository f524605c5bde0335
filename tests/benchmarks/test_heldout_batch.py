"""The held-out batch benchmark runs at toy size and prints each batch's time beside the derived batch."""

from __future__ import annotations

from andrea_lab.fit import eval_batch
from benchmarks import heldout_batch as bench


def test_toy_run_times_every_batch_and_names_the_derived_one(capsys, monkeypatch):
    monkeypatch.setattr(eval_batch, "last_level_cache_bytes", lambda: 2 << 20)
    assert bench.main(["--widths", "32,64", "--batches", "2,4", "--windows", "8", "--rounds", "1", "--no-setup"]) == 0
    printed = capsys.readouterr().out
    assert "bound 1048576 bytes" in printed
    # The precision the sweep's rule takes: fp32 below speed_path.BF16_FROM_WIDTH (d64), bf16 autocast from it.
    assert "d32 fp32, 8 windows: derived batch 2" in printed  # 1 MiB / 377,600 bytes a window
    assert "d64 bf16 autocast, 8 windows: derived batch 3" in printed  # 1 MiB / 311,936 bytes a window
    assert "batch     2:" in printed and "batch     4:" in printed
