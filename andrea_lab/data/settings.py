"""``AndreaDataModule``'s settings as one validated value, checked at construction before any slow work.

A wrong setting should fail in the first second with a sentence saying what
to change, not after minutes of tokenizer training. ``DataConfigError`` lets
the CLI show these as messages rather than tracebacks. The data module's
``__init__`` signature stays the CLI schema; :class:`DataSettings` is what it
turns those arguments into: the tokenizer spec parsed once
(:class:`~andrea_lab.data.tokenizer_spec.TokenizerSpec`), every range checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from andrea_lab.data.split import validate_val_fraction
from andrea_lab.data.tokenizer import TokenizerError
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.errors import UsageError


class DataConfigError(UsageError):
    """A data-module setting cannot work; the message names it and what would."""


@dataclass(frozen=True)
class DataSettings:
    """The data module's arguments, validated (see ``AndreaDataModule`` for what each means)."""

    corpus: str
    tokenizer: TokenizerSpec
    batch_size: int
    block_size: int
    vocab_size: int
    val_fraction: float
    seed: int
    samples_per_epoch: Optional[int]
    max_val_batches: Optional[int]
    num_workers: int
    cache_dir: Optional[str]
    text_field: str

    @classmethod
    def of(cls, tokenizer: str, **arguments) -> "DataSettings":
        """The settings from the data module's arguments, the tokenizer spec parsed; one
        :class:`DataConfigError` naming the first value that cannot work."""
        check_numbers(**{name: arguments[name] for name in _NUMBERS})
        try:
            spec = TokenizerSpec.of(tokenizer)
            spec.check_model_vocab(arguments["vocab_size"])
        except TokenizerError as error:
            raise DataConfigError(str(error)) from None
        check_corpus_spec(arguments["corpus"])
        return cls(tokenizer=spec, **arguments)


_NUMBERS = (
    "batch_size",
    "block_size",
    "vocab_size",
    "val_fraction",
    "seed",
    "samples_per_epoch",
    "max_val_batches",
    "num_workers",
)


#: numpy's seed range, as for seed_everything: a larger seed (2**80) overflowed torch.Generator's int64
#: mid-fit, after the run directory was claimed.
MAX_SEED = 2**32 - 1


def check_numbers(
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
    if not 0 <= seed <= MAX_SEED:
        raise DataConfigError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed}")
    if samples_per_epoch is not None and samples_per_epoch < batch_size:
        raise DataConfigError(f"samples_per_epoch must be at least batch_size ({batch_size}), got {samples_per_epoch}")
    if max_val_batches is not None and max_val_batches <= 0:
        raise DataConfigError(f"max_val_batches must be positive or null, got {max_val_batches}")
    if num_workers < 0:
        raise DataConfigError(f"num_workers must be >= 0, got {num_workers}")


def check_corpus_spec(spec: object) -> None:
    """A corpus is named: an empty or blank string would resolve to the working directory."""
    if not isinstance(spec, str) or not spec.strip():
        raise DataConfigError(
            f"corpus must name the data, got {spec!r}; valid corpora are 'stdlib', a text file, "
            "a directory, a glob pattern, JSONL/Parquet files, a shard directory or an llm.c "
            "token file"
        )
