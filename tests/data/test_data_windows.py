"""Windows: each training sample is a pure function of (seed, index); validation is fixed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from andrea_lab.data.windows import RandomWindowDataset, SequentialWindowDataset, StepSampler

TOKENS = (np.arange(5000) * 7919 % 65521).astype(np.uint16)  # distinct-looking ids, no structure


def test_sample_is_a_pure_function_of_seed_and_index() -> None:
    first = RandomWindowDataset(TOKENS, 32, num_samples=10, seed=5)
    np.random.seed(123)
    torch.manual_seed(456)  # global RNG state must not matter
    second = RandomWindowDataset(TOKENS.copy(), 32, num_samples=99, seed=5)
    for index in (0, 1, 9, 10, 12345, 10**12):
        x1, y1 = first[index]
        x2, y2 = second[index]
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_different_seeds_and_indices_give_different_windows() -> None:
    a = RandomWindowDataset(TOKENS, 32, num_samples=50, seed=1)
    b = RandomWindowDataset(TOKENS, 32, num_samples=50, seed=2)
    starts_a = [a.start_of(i) for i in range(50)]
    starts_b = [b.start_of(i) for i in range(50)]
    assert starts_a != starts_b
    assert len(set(starts_a)) > 40  # indices of one seed spread out


def test_y_is_x_shifted_by_one_and_types_are_right() -> None:
    dataset = RandomWindowDataset(TOKENS, 16, num_samples=8, seed=0)
    for index in range(8):
        x, y = dataset[index]
        start = dataset.start_of(index)
        assert x.dtype == torch.int64 and y.dtype == torch.int64
        assert x.shape == (16,) and y.shape == (16,)
        assert x.tolist() == TOKENS[start : start + 16].tolist()
        assert y.tolist() == TOKENS[start + 1 : start + 17].tolist()


def test_windows_cover_the_whole_stream_including_the_last_start() -> None:
    tokens = np.arange(10, dtype=np.uint16)
    dataset = RandomWindowDataset(tokens, 8, num_samples=1, seed=3)
    starts = {dataset.start_of(i) for i in range(200)}
    assert starts == {0, 1}  # 10 tokens hold windows of 8+1 at starts 0 and 1 only


def test_index_bounds_and_argument_checks() -> None:
    dataset = RandomWindowDataset(TOKENS, 8, num_samples=4, seed=0)
    assert len(dataset) == 4
    with pytest.raises(IndexError):
        dataset[-1]
    with pytest.raises(ValueError, match=r"has 8 tokens.*block_size 8 needs 9"):
        RandomWindowDataset(np.zeros(8, np.uint16), 8, num_samples=1, seed=0)
    with pytest.raises(ValueError, match="seed"):
        RandomWindowDataset(TOKENS, 8, num_samples=1, seed=-1)
    with pytest.raises(ValueError, match="num_samples"):
        RandomWindowDataset(TOKENS, 8, num_samples=0, seed=0)


def test_step_sampler_moves_to_new_indices_each_epoch() -> None:
    sampler = StepSampler(batch_size=1, batches_per_epoch=5)
    assert list(sampler) == [0, 1, 2, 3, 4] and len(sampler) == 5
    sampler.set_epoch(3)
    assert list(sampler) == [15, 16, 17, 18, 19]
    assert len(sampler) == 5


def test_step_sampler_resumes_mid_epoch_where_it_stopped() -> None:
    full = list(StepSampler(batch_size=2, batches_per_epoch=4))
    resumed = StepSampler(batch_size=2, batches_per_epoch=4, resume_batch=3)
    assert list(resumed) == full[6:] and len(resumed) == 8  # len: the whole epoch, for Lightning
    resumed.set_epoch(1)  # later epochs are whole again
    assert list(resumed) == list(range(8, 16))


def test_ranks_share_out_exactly_the_single_process_batch() -> None:
    single = list(StepSampler(batch_size=6, batches_per_epoch=3))
    ranks = [list(StepSampler(batch_size=2, batches_per_epoch=3, rank=r, world_size=3)) for r in range(3)]
    assert set(ranks[0]).isdisjoint(ranks[1]) and set(ranks[1]).isdisjoint(ranks[2])
    for step in range(3):
        together = sorted(i for rank in ranks for i in rank[2 * step : 2 * step + 2])
        assert together == single[6 * step : 6 * step + 6]


def test_dataloader_batches_depend_only_on_seed_and_step() -> None:
    def batches(epoch: int) -> list[torch.Tensor]:
        dataset = RandomWindowDataset(TOKENS, 8, num_samples=12, seed=9)
        sampler = StepSampler(batch_size=4, batches_per_epoch=3)
        sampler.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=True)
        return [x for x, _ in loader]

    epoch0, again, epoch1 = batches(0), batches(0), batches(1)
    assert all(torch.equal(a, b) for a, b in zip(epoch0, again))
    assert not torch.equal(epoch0[0], epoch1[0])
    # step 3 (= epoch 1, batch 0) is samples 12..15, whatever the epoch length bookkeeping
    dataset = RandomWindowDataset(TOKENS, 8, num_samples=12, seed=9)
    assert torch.equal(epoch1[0], torch.stack([dataset[i][0] for i in range(12, 16)]))


def test_sequential_windows_are_consecutive_and_non_overlapping() -> None:
    tokens = np.arange(100, dtype=np.uint16)
    dataset = SequentialWindowDataset(tokens, 10)
    assert len(dataset) == 9  # (100 - 1) // 10
    for index in range(len(dataset)):
        x, y = dataset[index]
        assert x.tolist() == list(range(10 * index, 10 * index + 10))
        assert y.tolist() == list(range(10 * index + 1, 10 * index + 11))
    with pytest.raises(IndexError):
        dataset[9]


def test_sequential_windows_cap_and_exact_fit() -> None:
    tokens = np.arange(101, dtype=np.uint16)
    assert len(SequentialWindowDataset(tokens, 10)) == 10
    assert len(SequentialWindowDataset(tokens, 10, max_windows=3)) == 3
    assert len(SequentialWindowDataset(tokens, 10, max_windows=1000)) == 10
    with pytest.raises(ValueError, match="validation stream has 5 tokens"):
        SequentialWindowDataset(tokens[:5], 10)
