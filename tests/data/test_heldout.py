"""The held-out evaluation's windows and its standard error over documents (andrea_lab.data.heldout)."""

from __future__ import annotations

import numpy as np
import pytest

from andrea_lab.data.heldout import (
    HeldOutDataset,
    capped_mean,
    clustered_mean,
    document_boundaries,
    document_cap,
    plan_heldout,
)

EOT = 9


def stream_of(lengths: list[int]) -> np.ndarray:
    """Documents of the given lengths (tokens 0..8), <|endoftext|> (9) between them."""
    rng = np.random.default_rng(0)
    parts = []
    for number, length in enumerate(lengths):
        if number:
            parts.append(np.array([EOT]))
        parts.append(rng.integers(0, EOT, size=length))
    return np.concatenate(parts).astype(np.uint16)


def test_a_small_split_is_scored_whole_and_every_target_knows_its_document():
    tokens = stream_of([10, 30, 5, 20])  # 65 + 3 separators = 68 tokens
    plan = plan_heldout(tokens, block_size=8, eot_id=EOT, max_tokens=1000)
    assert not plan.sampled and plan.window_starts.tolist() == list(range(0, 64, 8))
    assert plan.unit_count == 4 and plan.se_unit == "documents" and plan.tokens == 64
    # Target position p belongs to the document it lies in; the separator after a document is its last token.
    boundaries = document_boundaries(tokens, EOT).tolist()
    assert boundaries == [10, 41, 47]
    for window, start in enumerate(plan.window_starts):
        for offset in range(8):
            position = start + 1 + offset
            expected = sum(1 for b in boundaries if b < position)
            assert plan.units[window, offset] == expected


def test_a_large_split_is_a_seeded_uniform_sample_across_the_whole_stream():
    tokens = stream_of([997] * 200)
    plan = plan_heldout(tokens, block_size=16, eot_id=EOT, max_tokens=16 * 300, seed=3)
    again = plan_heldout(tokens, block_size=16, eot_id=EOT, max_tokens=16 * 300, seed=3)
    other = plan_heldout(tokens, block_size=16, eot_id=EOT, max_tokens=16 * 300, seed=4)
    assert plan.sampled and plan.window_starts.size == 300
    assert np.array_equal(plan.window_starts, again.window_starts)  # the same windows for every run
    assert not np.array_equal(plan.window_starts, other.window_starts)
    assert len(set(plan.window_starts.tolist())) == 300  # without replacement
    # Spread across the stream, not its start: windows from every fifth of it, most documents covered.
    fifths = np.bincount(plan.window_starts * 5 // len(tokens), minlength=5)
    assert fifths.min() >= 40 and plan.unit_count >= 150


def test_a_stream_without_documents_uses_blocks_of_windows():
    tokens = np.arange(16 * 64 + 1, dtype=np.uint16) % 50
    plan = plan_heldout(tokens, block_size=16, eot_id=None, max_tokens=10_000)
    assert plan.se_unit == "blocks" and plan.unit_count == 4  # 64 windows in blocks of 16
    x, y, units = HeldOutDataset(tokens, plan)[17]
    assert x.tolist() == tokens[272:288].tolist() and y.tolist() == tokens[273:289].tolist()
    assert units.tolist() == [1] * 16


def test_clustered_mean_is_the_token_weighted_mean_with_the_ratio_estimators_error():
    sums, counts = np.array([10.0, 30.0, 8.0]), np.array([5.0, 10.0, 4.0])
    mean, se = clustered_mean(sums, counts)
    assert mean == pytest.approx(48 / 19)
    residuals = sums - mean * counts
    assert se == pytest.approx(np.sqrt(3 / 2 * np.sum(residuals**2)) / 19)
    assert clustered_mean(np.array([4.0, 0.0]), np.array([2.0, 0.0])) == (2.0, None)  # one unit: no error


def test_the_error_over_documents_covers_the_spread_between_documents():
    """Documents differ in difficulty: the SE over documents matches the real sampling spread of the mean
    over documents (simulated), where a per-token error would be several times too small."""
    rng = np.random.default_rng(1)
    means, errors, naive = [], [], []
    for _ in range(400):
        difficulty = rng.normal(3.0, 0.3, size=40)  # per-document mean loss
        counts = rng.integers(200, 2000, size=40).astype(float)
        token_sd = 1.0
        sums = difficulty * counts + rng.normal(0, token_sd * np.sqrt(counts))
        mean, se = clustered_mean(sums, counts)
        means.append(mean)
        errors.append(se)
        naive.append(token_sd / np.sqrt(counts.sum()))
    spread = np.std(means, ddof=1)
    assert 0.8 < np.mean(errors) / spread < 1.2
    assert np.mean(naive) < spread / 4


def test_bad_budgets_are_refused_with_the_numbers():
    with pytest.raises(ValueError, match="max_tokens .8. must be at least one window .block_size 16"):
        plan_heldout(stream_of([100]), block_size=16, eot_id=EOT, max_tokens=8)


# ---------------------------------------------------------------- the document-weighted score


def test_the_cap_holds_every_document_to_the_stated_share() -> None:
    counts = np.array([176_756, 16_064, 9_812, 9_400] + [2_000] * 28, dtype=float)  # the stdlib's shape
    cap = document_cap(counts, 0.05)
    weighted = np.minimum(counts, cap)
    assert weighted.max() / weighted.sum() == pytest.approx(0.05, rel=1e-6)
    assert np.minimum(counts, cap * 1.01).max() / np.minimum(counts, cap * 1.01).sum() > 0.05  # the largest such


def test_no_cap_where_none_is_needed_and_equal_weights_where_few_documents() -> None:
    even = np.array([100.0] * 40)
    assert document_cap(even, 0.05) == 100.0
    few = np.array([5_000.0, 300.0, 200.0])  # three documents cannot go below 1/3 each
    cap = document_cap(few, 0.05)
    assert np.minimum(few, cap).max() / np.minimum(few, cap).sum() == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="no scored tokens"):
        document_cap(np.zeros(3))
    with pytest.raises(ValueError, match="max_share"):
        document_cap(even, 0.0)


def test_capped_mean_weights_each_documents_per_token_loss() -> None:
    counts = np.array([9_000.0, 500.0, 500.0])
    per_token = np.array([1.0, 3.0, 5.0])
    token_mean, _ = clustered_mean(per_token * counts, counts)
    mean, se, cap, share = capped_mean(per_token * counts, counts, max_share=0.05)
    assert token_mean == pytest.approx((9_000 + 1_500 + 2_500) / 10_000)  # the long document decides it
    assert (cap, share) == (pytest.approx(500.0), pytest.approx(1 / 3))
    assert mean == pytest.approx(3.0)  # all three weigh alike: the mean of the per-token losses
    assert se is not None and se > 0
    same, _, _, _ = capped_mean(per_token * counts, counts, max_share=1.0)
    assert same == pytest.approx(token_mean)  # no cap asked: the token-weighted mean
