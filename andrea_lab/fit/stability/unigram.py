"""The unigram loss of the training data: the level a model that learned only token frequencies reaches,
which the divergence detector treats as "stuck" (docs/stability.md)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Optional

import lightning as L
import numpy as np

from andrea_lab.fit.stability.events import unigram_entropy
from andrea_lab.model.transformer import Andrea


def sample_unigram_loss(tokens: Any, vocab_size: int, max_tokens: int = 1_000_000, chunks: int = 16) -> float:
    """Unigram entropy (nats) of a token stream, from ``chunks`` evenly spaced contiguous slices holding
    at most ``max_tokens`` tokens in all. ``tokens`` supports ``len`` and contiguous slicing (a numpy
    array, a memmap, :class:`andrea_lab.data.token_file.MappedTokens`)."""
    total = len(tokens)
    if total == 0:
        raise ValueError("no tokens to estimate the unigram loss from")
    if total <= max_tokens:
        parts = [np.asarray(tokens[0:total])]
    else:
        size = max(1, max_tokens // chunks)
        starts = np.linspace(0, total - size, chunks).astype(np.int64)
        parts = [np.asarray(tokens[int(s) : int(s) + size]) for s in starts]
    counts = np.bincount(np.concatenate(parts).astype(np.int64), minlength=vocab_size)
    return unigram_entropy(counts.tolist())


def _train_token_stream(datamodule: Any) -> Any:
    """The training token stream of a data module, if it exposes one (``AndreaDataModule.train_token_stream``)."""
    try:
        stream = getattr(datamodule, "train_token_stream", None)
    except RuntimeError:  # not set up yet
        return None
    return stream if stream is not None and hasattr(stream, "__len__") else None


def measure_unigram_loss(trainer: L.Trainer, model: Optional[Andrea], sample_tokens: int) -> Optional[float]:
    """The unigram loss of the data module's training tokens (a sample of ``sample_tokens``), else
    ln(vocab_size) when the data exposes no token stream; None without an Andrea model to size it."""
    vocab_size = None if model is None else model.config.vocab_size
    stream = _train_token_stream(trainer.datamodule) if trainer.datamodule is not None else None
    if stream is not None and vocab_size:
        try:
            return sample_unigram_loss(stream, vocab_size, sample_tokens)
        except Exception as exc:
            warnings.warn(
                f"StabilityMonitor: could not measure the unigram loss from the training tokens "
                f"({type(exc).__name__}: {exc}); using ln(vocab_size)"
            )
    if vocab_size:
        return math.log(vocab_size)
    return None
