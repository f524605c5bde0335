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
(streaming, any size), or over all documents at once with at least one document on each side
(a small text corpus, whose few documents the hash alone could all put on one side). The second hashes
each document's near-duplicate *family* (:mod:`andrea_lab.data.families`), not its own name, so that
near-copies of a held-out file are never trained on (split version 2; version 1 hashed each name).
"""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import Callable, Optional, Sequence

# Bump when the split rule changes: it is part of the tokenized-cache key.
SPLIT_VERSION = 1
#: Each rule's version (split_version_of): the rule over all documents hashes families since version 2.
_RULE_VERSIONS = {"by key": SPLIT_VERSION, "at least one on each side": 2}


#: Where a document goes: ``both`` is one document split by position (train first, its end validation).
TRAIN, VAL, BOTH = "train", "val", "both"


class SplitRule(str, Enum):
    """How the tokenize pipeline sends documents to train or validation (its value is in the manifest)."""

    BY_KEY = "by key"  # each record by name_score(key) < val_fraction
    EACH_SIDE = "at least one on each side"  # split_documents over all names; one document by position


def split_version_of(rule: SplitRule) -> int:
    """The version of ``rule`` a tokenized cache records (and is keyed by)."""
    return _RULE_VERSIONS[rule.value]


def document_sides(
    rule: SplitRule, val_fraction: float, names: Sequence[str], families: Optional[Sequence[str]] = None
) -> Callable[[int, str], str]:
    """``side(index, key)``: TRAIN, VAL or BOTH for the record at ``index`` with ``key``. ``names`` (every
    document's name, in corpus order) and ``families`` (each one's family name, default its own name) are
    read only by ``EACH_SIDE``, which decides over all of them."""
    validate_val_fraction(val_fraction)
    if rule is SplitRule.BY_KEY:
        return lambda index, key: VAL if name_score(key) < val_fraction else TRAIN
    if len(names) < 2:
        return lambda index, key: BOTH
    held_out = set(split_documents(names, val_fraction, families)[1])
    return lambda index, key: VAL if index in held_out else TRAIN


def validate_val_fraction(val_fraction: float) -> None:
    """Reject fractions that would leave either side empty."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be strictly between 0 and 1, got {val_fraction}")


def name_score(name: str) -> float:
    """A stable pseudo-random number in [0, 1) for a document name."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_documents(
    names: Sequence[str], val_fraction: float, families: Optional[Sequence[str]] = None
) -> tuple[list[int], list[int]]:
    """Indices of the train and validation documents, each in corpus order.

    A document goes where the hash of its family's name sends it (``families``: one name per document;
    default each document its own family), so a family is never split. With two or more families both
    sides get at least one: if the hash put none in validation, the lowest-scoring family goes there; if it
    put all there, the highest-scoring one returns to training. Documents that are all one family are
    split one by one (nothing else can give both sides a document).
    """
    validate_val_fraction(val_fraction)
    if len(names) < 2:
        raise ValueError(f"splitting by document needs at least 2 documents, got {len(names)}")
    keys = list(names if families is None else families)
    if len(keys) != len(names):
        raise ValueError(f"{len(names)} documents but {len(keys)} family names")
    if len(set(keys)) < 2:
        keys = list(names)
    scores = [name_score(key) for key in keys]
    is_val = [score < val_fraction for score in scores]
    if not any(is_val):
        lowest = keys[min(range(len(names)), key=scores.__getitem__)]
        is_val = [key == lowest for key in keys]
    if all(is_val):
        highest = keys[max(range(len(names)), key=scores.__getitem__)]
        is_val = [key != highest for key in keys]
    train = [index for index, val in enumerate(is_val) if not val]
    val = [index for index, val in enumerate(is_val) if val]
    return train, val


def split_point(total_tokens: int, val_fraction: float) -> int:
    """Where validation starts when the last ``val_fraction`` of a stream is held out."""
    validate_val_fraction(val_fraction)
    return total_tokens - int(round(total_tokens * val_fraction))
