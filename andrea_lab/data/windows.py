"""Training and validation windows over a token stream.

Training samples are a pure function of ``(seed, index)``: sample ``i``'s
window start comes from a generator seeded with ``[seed, i]`` alone, never
from a global RNG, worker id or epoch counter. Together with
``StepSampler`` (micro-batch ``b`` asks for indices ``b*B .. b*B+B-1``)
the data of every training step depends only on the seed and the step, so

* two model variants trained with the same seed see identical batches
  (paired comparisons cancel data noise), and
* a resumed run sees exactly the batches it would have seen.

Validation uses fixed consecutive windows, so every evaluation scores the
same tokens.
"""

from __future__ import annotations

from typing import Iterator, Optional, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler


class TokenStream(Protocol):
    """What windows need from tokens: a length and contiguous slices (ndarray, memmap, MappedTokens)."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: slice) -> np.ndarray: ...


def _window(tokens: TokenStream, start: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` int64 tensors where ``y`` is ``x`` shifted left by one token."""
    chunk = torch.from_numpy(np.asarray(tokens[start : start + block_size + 1], dtype=np.int64))
    return chunk[:-1], chunk[1:]


def _check_stream(tokens: TokenStream, block_size: int, what: str) -> None:
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if len(tokens) < block_size + 1:
        raise ValueError(
            f"the {what} stream has {len(tokens)} tokens, but one window of block_size {block_size} "
            f"needs {block_size + 1}"
        )


class RandomWindowDataset(Dataset):
    """Windows at random starts; item ``i`` depends only on ``(seed, i)``.

    Any non-negative index is valid (``__len__`` is just the number of
    samples per epoch), so later epochs simply ask for larger indices.
    """

    def __init__(self, tokens: TokenStream, block_size: int, num_samples: int, seed: int) -> None:
        _check_stream(tokens, block_size, "training")
        if num_samples <= 0:
            raise ValueError(f"num_samples must be positive, got {num_samples}")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.tokens = tokens
        self.block_size = block_size
        self.num_samples = num_samples
        self.seed = seed
        # Highest start that still leaves block_size + 1 tokens.
        self._last_start = len(tokens) - block_size - 1

    def __len__(self) -> int:
        return self.num_samples

    def start_of(self, index: int) -> int:
        """Where sample ``index`` starts in the stream."""
        if index < 0:
            raise IndexError(f"sample index must be non-negative, got {index}")
        generator = np.random.Generator(np.random.PCG64([self.seed, index]))
        return int(generator.integers(0, self._last_start, endpoint=True))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _window(self.tokens, self.start_of(int(index)), self.block_size)


class StepSampler(Sampler[int]):
    """Sample indices as a pure function of (micro-batch number, rank): resumable and DDP-consistent.

    Micro-batch ``b`` (counted over the whole run, across epochs) on rank ``r`` of ``world_size``
    takes samples ``b·B·W + r·B … b·B·W + r·B + B − 1``. So

    * a single process with batch ``B·W`` sees exactly the samples that ``W`` DDP ranks with batch
      ``B`` see together at the same step, each rank a disjoint share;
    * a run resumed after micro-batch ``k`` continues with micro-batch ``k`` (``resume_batch``) —
      mid-epoch too — instead of restarting the epoch;
    * epoch ``e`` covers micro-batches ``e·n … e·n + n − 1`` (Lightning calls ``set_epoch``).
    """

    def __init__(
        self,
        batch_size: int,
        batches_per_epoch: int,
        rank: int = 0,
        world_size: int = 1,
        epoch: int = 0,
        resume_batch: int = 0,
    ) -> None:
        if batch_size <= 0 or batches_per_epoch <= 0:
            raise ValueError(
                f"batch_size and batches_per_epoch must be positive, got {batch_size}, {batches_per_epoch}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.batch_size = batch_size
        self.batches_per_epoch = batches_per_epoch
        self.rank = rank
        self.world_size = world_size
        self.epoch = epoch
        self.resume_batch = resume_batch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> range:
        """The micro-batch numbers this epoch still has to yield."""
        first = self.epoch * self.batches_per_epoch
        return range(max(first, self.resume_batch), first + self.batches_per_epoch)

    def __iter__(self) -> Iterator[int]:
        stride = self.batch_size * self.world_size
        for batch in self.batches():
            base = batch * stride + self.rank * self.batch_size
            yield from range(base, base + self.batch_size)

    def __len__(self) -> int:
        # Always the whole epoch: Lightning sizes the epoch from this before a resumed run's
        # restored progress is taken into account, and ends the epoch when the iterator stops.
        return self.batches_per_epoch * self.batch_size


class SequentialWindowDataset(Dataset):
    """Non-overlapping consecutive windows from the start of the stream, optionally capped."""

    def __init__(self, tokens: TokenStream, block_size: int, max_windows: Optional[int] = None) -> None:
        _check_stream(tokens, block_size, "validation")
        if max_windows is not None and max_windows <= 0:
            raise ValueError(f"max_windows must be positive or None, got {max_windows}")
        self.tokens = tokens
        self.block_size = block_size
        available = (len(tokens) - 1) // block_size
        self.num_windows = available if max_windows is None else min(available, max_windows)

    def __len__(self) -> int:
        return self.num_windows

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.num_windows:
            raise IndexError(f"window {index} out of range 0..{self.num_windows - 1}")
        return _window(self.tokens, index * self.block_size, self.block_size)
