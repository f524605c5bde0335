"""Deterministic train/validation splits.

Text corpora are split by *document*: a document belongs to validation when
a hash of its name falls under ``val_fraction``. Splitting by document (not
by position in one long stream) keeps validation text unseen as a whole, so
validation loss measures generalisation, not memorised neighbours of
training windows. Hashing the name (not the order) means adding a file to a
corpus does not move any other file across the split.

A corpus that is one stream (a single document or a token file) can only be
split by position: its last ``val_fraction`` of tokens is validation.

The tokenize pipeline takes one of two rules (:class:`SplitRule`): each record by its own hash
(streaming, any size), or over all document names at once with at least one document on each side
(a small text corpus, whose few documents the hash alone could all put on one side).
"""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import Callable, Sequence

# Bump when the split rule changes: it is part of the tokenized-cache key.
SPLIT_VERSION = 1


#: Where a document goes: ``both`` is one document split by position (train first, its end validation).
TRAIN, VAL, BOTH = "train", "val", "both"


class SplitRule(str, Enum):
    """How the tokenize pipeline sends documents to train or validation (its value is in the manifest)."""

    BY_KEY = "by key"  # each record by name_score(key) < val_fraction
    EACH_SIDE = "at least one on each side"  # split_documents over all names; one document by position


def document_sides(rule: SplitRule, val_fraction: float, names: Sequence[str]) -> Callable[[int, str], str]:
    """``side(index, key)``: TRAIN, VAL or BOTH for the record at ``index`` with ``key``. ``names`` (every
    document's name, in corpus order) is read only by ``EACH_SIDE``, which decides over all of them."""
    validate_val_fraction(val_fraction)
    if rule is SplitRule.BY_KEY:
        return lambda index, key: VAL if name_score(key) < val_fraction else TRAIN
    if len(names) < 2:
        return lambda index, key: BOTH
    held_out = set(split_documents(names, val_fraction)[1])
    return lambda index, key: VAL if index in held_out else TRAIN


def validate_val_fraction(val_fraction: float) -> None:
    """Reject fractions that would leave either side empty."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be strictly between 0 and 1, got {val_fraction}")


def name_score(name: str) -> float:
    """A stable pseudo-random number in [0, 1) for a document name."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_documents(names: Sequence[str], val_fraction: float) -> tuple[list[int], list[int]]:
    """Indices of the train and validation documents, each in corpus order.

    With two or more documents both sides get at least one: if the hash put
    none in validation, the lowest-scoring document goes there; if it put
    all there, the highest-scoring one returns to training.
    """
    validate_val_fraction(val_fraction)
    if len(names) < 2:
        raise ValueError(f"splitting by document needs at least 2 documents, got {len(names)}")
    scores = [name_score(name) for name in names]
    is_val = [score < val_fraction for score in scores]
    if not any(is_val):
        is_val[min(range(len(names)), key=scores.__getitem__)] = True
    if all(is_val):
        is_val[max(range(len(names)), key=scores.__getitem__)] = False
    train = [index for index, val in enumerate(is_val) if not val]
    val = [index for index, val in enumerate(is_val) if val]
    return train, val


def split_point(total_tokens: int, val_fraction: float) -> int:
    """Where validation starts when the last ``val_fraction`` of a stream is held out."""
    validate_val_fraction(val_fraction)
    return total_tokens - int(round(total_tokens * val_fraction))
