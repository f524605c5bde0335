"""An evaluation's batch from the model's shape and a memory bound (andrea_lab.fit.eval_batch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from andrea_lab.fit import eval_batch
from andrea_lab.fit.eval_batch import eval_batch_size, last_level_cache_bytes, scoring_precision, window_bytes

TINY = SimpleNamespace(block_size=4, vocab_size=10, d_model=8, n_head=2, mlp_ratio=None)


def test_a_windows_bytes_are_its_logits_one_blocks_activations_and_one_blocks_scores():
    logits = 4 * 10 * (4 + 4 + 4)  # the logits, their float copy, the log-softmax
    block = 4 * 8 * (6 + 2 * 4.0) * 4  # mlp_ratio null: the activation's default of 4
    scores = 2 * 4 * 4 * 4
    assert window_bytes(TINY, 4) == logits + block + scores == 2400
    assert window_bytes(TINY, 2) == 4 * 10 * (2 + 4 + 4) + 4 * 8 * 14 * 2 + 2 * 4 * 4 * 2 == 1360
    assert window_bytes(SimpleNamespace(**{**vars(TINY), "mlp_ratio": 2.0}), 4) == 2400 - 4 * 8 * 4 * 4


def test_the_batch_is_what_the_bound_holds_and_at_least_one():
    assert eval_batch_size(TINY, 4, 2400 * 10) == 10
    assert eval_batch_size(TINY, 4, 2400 * 10 + 2399) == 10
    assert eval_batch_size(TINY, 2, 2400 * 10) == 17  # bf16 activations: more windows in the same memory
    assert eval_batch_size(TINY, 4, 100) == 1


def test_the_last_level_cache_is_read_from_sysfs(tmp_path):
    for index, (level, size) in enumerate([(1, "48K"), (2, "2048K"), (3, "32768K")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(tmp_path) == 32 << 20
    (tmp_path / "index2" / "size").write_text("lots\n")
    assert last_level_cache_bytes(tmp_path) == 2 << 20  # an unreadable size: the level below
    assert last_level_cache_bytes(tmp_path / "absent") is None


def test_the_cpu_bound_is_half_the_cache_or_half_of_a_32_mib_one(monkeypatch):
    monkeypatch.setattr(eval_batch, "last_level_cache_bytes", lambda: 8 << 20)
    assert eval_batch.memory_bound(torch.device("cpu")) == 4 << 20
    monkeypatch.setattr(eval_batch, "last_level_cache_bytes", lambda: None)
    assert eval_batch.memory_bound(torch.device("cpu")) == 16 << 20


def test_the_precision_that_scores_is_autocasts_where_it_is_on():
    cpu = torch.device("cpu")
    assert scoring_precision(cpu, torch.float32) == (torch.float32, "float32")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert scoring_precision(cpu, torch.float32) == (torch.bfloat16, "bfloat16 autocast")
    assert scoring_precision(cpu, torch.bfloat16) == (torch.bfloat16, "bfloat16")


@pytest.mark.parametrize("width, heads, compute, expected", [(64, 4, 4, 34), (256, 8, 2, 24)])
def test_on_a_32_mib_cache_the_rule_lands_in_the_fastest_measured_batches(width, heads, compute, expected):
    """The module docstring's table: 16-128 windows were fastest at d64 fp32 and at d256 bf16 (64 tokens)."""
    config = SimpleNamespace(block_size=64, vocab_size=257, d_model=width, n_head=heads, mlp_ratio=None)
    assert eval_batch_size(config, compute, (32 << 20) // eval_batch.CACHE_SHARE) == expected
