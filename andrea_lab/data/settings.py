"""Checks on ``AndreaDataModule`` settings, run at construction before any slow work.

A wrong setting should fail in the first second with a sentence saying what
to change, not after minutes of tokenizer training. ``DataConfigError`` lets
the CLI show these as messages rather than tracebacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.split import validate_val_fraction
from andrea_lab.errors import UsageError


class DataConfigError(UsageError):
    """A data-module setting cannot work; the message names it and what would."""


def check_settings(
    batch_size: int,
    block_size: int,
    vocab_size: int,
    val_fraction: float,
    seed: int,
    samples_per_epoch: Optional[int],
    max_val_batches: Optional[int],
    num_workers: int,
) -> None:
    """Reject numeric settings outside their valid ranges."""
    for name, value in (("batch_size", batch_size), ("block_size", block_size), ("vocab_size", vocab_size)):
        if value <= 0:
            raise DataConfigError(f"{name} must be positive, got {value}")
    try:
        validate_val_fraction(val_fraction)
    except ValueError as error:
        raise DataConfigError(str(error)) from None
    if seed < 0:
        raise DataConfigError(f"seed must be non-negative, got {seed}")
    if samples_per_epoch is not None and samples_per_epoch < batch_size:
        raise DataConfigError(
            f"samples_per_epoch must be at least batch_size ({batch_size}), got {samples_per_epoch}"
        )
    if max_val_batches is not None and max_val_batches <= 0:
        raise DataConfigError(f"max_val_batches must be positive or null, got {max_val_batches}")
    if num_workers < 0:
        raise DataConfigError(f"num_workers must be >= 0, got {num_workers}")


def check_corpus_spec(spec: object) -> None:
    """A corpus is named: an empty or blank string would resolve to the working directory."""
    if not isinstance(spec, str) or not spec.strip():
        raise DataConfigError(f"corpus must name the data, got {spec!r}; valid corpora are 'stdlib', a text file, "
                              "a directory, a glob pattern, JSONL/Parquet files, a shard directory or an llm.c "
                              "token file")


def check_tokenizer_spec(spec: str, vocab_size: int) -> None:
    """Check the tokenizer can have exactly (or, for a tokenizer.json, at most) vocab_size ids."""
    byte_ids = tokenizers_lib.BYTE_VOCAB_SIZE
    if spec == "byte":
        if vocab_size != byte_ids:
            raise DataConfigError(
                f"tokenizer 'byte' has {byte_ids} ids but vocab_size is {vocab_size}; "
                f"set model.config.vocab_size: {byte_ids}"
            )
    elif spec == "bpe":
        if not byte_ids <= vocab_size <= tokenizers_lib.UINT16_VOCAB_LIMIT:
            raise DataConfigError(
                f"tokenizer 'bpe' needs vocab_size between {byte_ids} (256 bytes + {tokenizers_lib.END_OF_TEXT}) "
                f"and {tokenizers_lib.UINT16_VOCAB_LIMIT} (uint16 token files), got {vocab_size}"
            )
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise DataConfigError(f"tokenizer {spec!r} is not 'bpe', 'byte', or an existing tokenizer.json file")
        size = tokenizers_lib.load_tokenizer(path).get_vocab_size()
        if size > vocab_size:
            raise DataConfigError(
                f"tokenizer {path} has {size} ids but vocab_size is only {vocab_size}; "
                f"set model.config.vocab_size: {size}"
            )
