"""The held-out set a comparison can trust: windows drawn across *all* held-out documents.

The in-training validation scores a fixed, small run of consecutive windows from the start of the
held-out stream -- cheap, and fine for curves, but on the standard library that is one or two files,
so its number says more about those files than about the corpus. At the end of a fit the model is
scored instead on

* every non-overlapping window of the held-out stream, when it has at most ``max_tokens`` tokens;
* else a fixed sample of ``max_tokens // block_size`` of those windows, drawn uniformly with a seeded
  generator (the same windows for every run with the same data and seed, so runs stay comparable).

The loss is the token-weighted mean. Its standard error treats *documents* as the unit, not windows
or tokens: the windows of one document are correlated (one long, unusual file moves all of them), so
a per-window error would be far too small. With ``S_d`` the summed loss and ``N_d`` the scored tokens
of document ``d`` (n documents, ``m = ΣS_d / ΣN_d``), the ratio estimator's cluster-robust error is

    SE(m) = sqrt(n / (n − 1) · Σ_d (S_d − m·N_d)²) / Σ_d N_d.

A stream without document boundaries (a token file without a tokenizer) uses contiguous blocks of
``BLOCK_WINDOWS`` windows as the unit instead. A target token belongs to the document it ends or lies
in: the ``<|endoftext|>`` after a document counts as that document's last token.

The token-weighted mean lets one long document decide the score: on the standard library 63 % of the
held-out tokens were one file of help prose (``pydoc_data/topics.py``). The *document-weighted* score
(:func:`capped_mean`) caps every document's tokens at one number ``c``, the largest cap under which no
document carries more than :data:`MAX_DOCUMENT_SHARE` of the weight (or ``1/n`` of it, where ``n`` documents
cannot get below that): a document's per-token loss counts with weight ``min(N_d, c)``. Why a cap and not
the plain mean over documents: a 40-token ``__init__.py`` would then weigh as much as a 5,000-token module,
and its loss is mostly noise; under the cap, documents up to ``c`` tokens keep their natural weight and only
the long ones are held down. ``c`` depends only on the planned windows, not on the model, so every run on
the same data and seed is weighted alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from andrea_lab.data.windows import TokenStream

#: The default budget: held-out splits up to this size are scored whole (~2M tokens).
DEFAULT_MAX_TOKENS = 2_097_152
#: The most of the document-weighted score one document may carry (where there are enough documents).
MAX_DOCUMENT_SHARE = 0.05
#: Windows per unit of the standard error when the stream has no document boundaries.
BLOCK_WINDOWS = 16
_SCAN_TOKENS = 1 << 22  # boundaries are found in pieces, so a large memory-mapped split never loads whole


def document_boundaries(tokens: TokenStream, eot_id: int) -> np.ndarray:
    """Positions of every ``eot_id`` token in the stream (sorted), read piece by piece."""
    found = []
    for start in range(0, len(tokens), _SCAN_TOKENS):
        piece = np.asarray(tokens[start : start + _SCAN_TOKENS])
        found.append(np.flatnonzero(piece == eot_id) + start)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class HeldOutPlan:
    """Which windows are scored and which unit (document or block) each target token belongs to."""

    window_starts: np.ndarray  # (W,) start of each window's inputs; targets are start+1 .. start+T
    units: np.ndarray  # (W, T) compact unit index of every target token
    unit_count: int
    unit_ids: np.ndarray  # (unit_count,) each compact unit's document (or block) index in the held-out stream
    block_size: int
    split_tokens: int
    sampled: bool
    se_unit: str  # "documents" or "blocks"
    seed: int

    @property
    def tokens(self) -> int:
        return int(self.window_starts.size * self.block_size)


def plan_heldout(
    tokens: TokenStream, block_size: int, eot_id: Optional[int], max_tokens: int = DEFAULT_MAX_TOKENS, seed: int = 0
) -> HeldOutPlan:
    """The windows to score: all of them when they fit ``max_tokens``, else a seeded uniform sample."""
    if max_tokens < block_size:
        raise ValueError(f"heldout max_tokens ({max_tokens}) must be at least one window (block_size {block_size})")
    available = (len(tokens) - 1) // block_size
    if available < 1:
        raise ValueError(
            f"the held-out stream has {len(tokens)} tokens; one window of {block_size} needs {block_size + 1}"
        )
    wanted = max_tokens // block_size
    sampled = available > wanted
    if sampled:
        chosen = np.sort(np.random.default_rng(seed).choice(available, size=wanted, replace=False))
    else:
        chosen = np.arange(available)
    starts = chosen.astype(np.int64) * block_size
    targets = starts[:, None] + 1 + np.arange(block_size)[None, :]  # (W, T) stream positions of the targets
    if eot_id is not None:
        boundaries = document_boundaries(tokens, eot_id)
        raw_units, se_unit = np.searchsorted(boundaries, targets, side="left"), "documents"
    else:
        raw_units, se_unit = chosen[:, None] // BLOCK_WINDOWS + np.zeros_like(targets), "blocks"
    present, compact = np.unique(raw_units, return_inverse=True)
    return HeldOutPlan(
        starts,
        compact.reshape(targets.shape).astype(np.int64),
        int(present.size),
        present.astype(np.int64),
        block_size,
        int(len(tokens)),
        sampled,
        se_unit,
        seed,
    )


class HeldOutDataset(Dataset):
    """``(x, y, units)`` per planned window; ``units`` says which document each target token is from."""

    def __init__(self, tokens: TokenStream, plan: HeldOutPlan) -> None:
        self.tokens = tokens
        self.plan = plan

    def __len__(self) -> int:
        return int(self.plan.window_starts.size)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        start = int(self.plan.window_starts[index])
        chunk = torch.from_numpy(np.asarray(self.tokens[start : start + self.plan.block_size + 1], dtype=np.int64))
        return chunk[:-1], chunk[1:], torch.from_numpy(self.plan.units[index])


def clustered_mean(loss_sums: np.ndarray, token_counts: np.ndarray) -> tuple[float, Optional[float]]:
    """Token-weighted mean loss and its cluster-robust standard error (units = the array entries).

    The error is None for fewer than two units: one document cannot say how documents vary."""
    loss_sums = np.asarray(loss_sums, dtype=np.float64)
    token_counts = np.asarray(token_counts, dtype=np.float64)
    keep = token_counts > 0
    loss_sums, token_counts = loss_sums[keep], token_counts[keep]
    total = token_counts.sum()
    if total <= 0:
        raise ValueError("no scored tokens")
    mean = float(loss_sums.sum() / total)
    n = loss_sums.size
    if n < 2:
        return mean, None
    residuals = loss_sums - mean * token_counts
    return mean, float(np.sqrt(n / (n - 1) * np.sum(residuals**2)) / total)


def document_cap(token_counts: np.ndarray, max_share: float = MAX_DOCUMENT_SHARE) -> float:
    """The largest per-document token cap ``c`` under which no document carries more than
    ``max(max_share, 1/n)`` of ``sum(min(N_d, c))`` (n documents with tokens); the longest document's count
    when no cap is needed. The largest document's share ``c / sum(min(N_d, c))`` grows with ``c``, so
    the cap is found by bisection."""
    counts = np.asarray(token_counts, dtype=np.float64)
    counts = counts[counts > 0]
    if counts.size == 0:
        raise ValueError("no scored tokens")
    if not 0.0 < max_share <= 1.0:
        raise ValueError(f"max_share must be in (0, 1], got {max_share}")
    share = max(max_share, 1.0 / counts.size)

    def largest_share(cap: float) -> float:
        return min(cap, counts.max()) / np.minimum(counts, cap).sum()

    if largest_share(counts.max()) <= share:
        return float(counts.max())
    low, high = float(counts.min()), float(counts.max())  # largest_share(low) = 1/n <= share < largest_share(high)
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if largest_share(middle) <= share else (low, middle)
    return low


def capped_mean(
    loss_sums: np.ndarray, token_counts: np.ndarray, max_share: float = MAX_DOCUMENT_SHARE
) -> tuple[float, Optional[float], float, float]:
    """The document-weighted score: ``(mean, se, cap, largest_share)``. Each document's per-token loss is
    weighted by ``min(N_d, cap)`` (:func:`document_cap`); the error is :func:`clustered_mean`'s over the
    weighted sums (the weights are fixed by the plan, not estimated from the losses)."""
    loss_sums = np.asarray(loss_sums, dtype=np.float64)
    token_counts = np.asarray(token_counts, dtype=np.float64)
    keep = token_counts > 0
    loss_sums, token_counts = loss_sums[keep], token_counts[keep]
    cap = document_cap(token_counts, max_share)
    weights = np.minimum(1.0, cap / token_counts)
    mean, se = clustered_mean(loss_sums * weights, token_counts * weights)
    weighted = token_counts * weights
    return mean, se, cap, float(weighted.max() / weighted.sum())
