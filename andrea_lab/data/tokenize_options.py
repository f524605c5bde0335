"""What the one tokenize pipeline (tokenize_corpus.py) takes besides the corpus and the output directory, and
what it reports: :class:`TokenizeOptions` (each rule a typed field, checked with a message naming the value),
where ``<|endoftext|>`` goes, the bounds on shards and workers, and :class:`TokenizeReport`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional, Union

from andrea_lab.data.corpus import Corpus
from andrea_lab.data.parallel_encode import available_cores
from andrea_lab.data.shards import SPLITS
from andrea_lab.data.split import SplitRule, validate_val_fraction
from andrea_lab.data.tokenizer import TokenizerError
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.errors import UsageError

#: The smallest ``--shard-tokens``: every shard is a file, and a manifest entry rewritten with each new shard.
MIN_SHARD_TOKENS = 1024
#: The most shards a corpus may need at ``--shard-tokens`` (bounded by its size in bytes: a token is
#: at least one byte of text), so that a tiny ``--shard-tokens`` cannot ask for millions of files.
MAX_SHARDS = 10_000


def max_workers() -> int:
    """The most encoding processes ``--workers`` may ask for: more than the cores only adds memory."""
    return max(4, 2 * available_cores())


def check_shard_count(corpus: Corpus, shard_tokens: int) -> None:
    """Refuse a ``--shard-tokens`` that could split ``corpus`` into more than :data:`MAX_SHARDS` shards."""
    most = corpus.total_bytes() // shard_tokens + len(SPLITS)
    if most > MAX_SHARDS:
        least = corpus.total_bytes() // (MAX_SHARDS - len(SPLITS)) + 1
        raise TokenizeError(
            f"--shard-tokens {shard_tokens:,} could split this {corpus.total_bytes():,}-byte corpus "
            f"into up to {most:,} shards (at most {MAX_SHARDS:,}); use --shard-tokens {least:,} or more"
        )


class TokenizeError(UsageError):
    """The output directory or a setting cannot be used as asked."""


class EndOfText(str, Enum):
    """Where ``<|endoftext|>`` goes in a split's token stream (its value is in the manifest)."""

    AFTER_EACH = "after each document"  # llm.c's shards: every document ends with it
    BETWEEN = "between documents"  # small corpora's entries, as they always were: none after a split's last


@dataclass(frozen=True)
class TokenizeOptions:
    """What the pipeline takes besides the corpus and the output directory (the module docstring says
    what each rule means). ``tokenizer`` may be given as its spec string; it is held parsed."""

    tokenizer: Union[str, TokenizerSpec] = "bpe"
    vocab_size: int = 8449
    sample_docs: Optional[int] = 20_000
    seed: int = 1337
    val_fraction: float = 0.005
    shard_tokens: Optional[int] = 100_000_000
    workers: int = field(default_factory=available_cores)
    progress: bool = True
    split: SplitRule = SplitRule.BY_KEY
    end_of_text: EndOfText = EndOfText.AFTER_EACH

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "tokenizer", TokenizerSpec.of(self.tokenizer))
            object.__setattr__(self, "split", SplitRule(self.split))  # a rule's value names it too
            object.__setattr__(self, "end_of_text", EndOfText(self.end_of_text))
        except (TokenizerError, ValueError) as error:
            raise TokenizeError(str(error)) from None

    @classmethod
    def whole_documents(cls, tokenizer: TokenizerSpec, vocab_size: int, val_fraction: float) -> "TokenizeOptions":
        """The rules of a small text corpus's cache entry (``stdlib``, files, a directory, a glob): the
        split, BPE and ``<|endoftext|>`` placement those entries always had, so their batches stay as
        they were; one shard per split; encoded in this process (no workers from a user's script)."""
        return cls(
            tokenizer=tokenizer,
            vocab_size=vocab_size,
            sample_docs=None,
            val_fraction=val_fraction,
            shard_tokens=None,
            workers=0,
            progress=False,
            split=SplitRule.EACH_SIDE,
            end_of_text=EndOfText.BETWEEN,
        )

    @property
    def spec(self) -> TokenizerSpec:
        """The tokenizer, parsed (``__post_init__`` made sure)."""
        assert isinstance(self.tokenizer, TokenizerSpec)
        return self.tokenizer

    def check(self) -> None:
        """Reject settings that cannot work, naming the value and what would."""
        try:
            validate_val_fraction(self.val_fraction)
            self.spec.check_shard_vocab(self.vocab_size)
        except (ValueError, TokenizerError) as error:
            raise TokenizeError(str(error)) from None
        if self.sample_docs is not None and self.sample_docs < 1:
            raise TokenizeError(f"--sample-docs must be at least 1, got {self.sample_docs}")
        if self.shard_tokens is not None and self.shard_tokens < MIN_SHARD_TOKENS:
            raise TokenizeError(
                f"--shard-tokens must be at least {MIN_SHARD_TOKENS:,} (each shard is a file and a "
                f"manifest entry; llm.c's are 100,000,000), got {self.shard_tokens}"
            )
        if self.end_of_text is EndOfText.BETWEEN and self.shard_tokens is not None:
            raise TokenizeError(f"end_of_text {self.end_of_text.value!r} needs one shard per split (shard_tokens None)")
        if not 0 <= self.workers <= max_workers():
            raise TokenizeError(
                f"--workers must be 0 (encode in this process) or more, at most {max_workers()} "
                f"(twice the {available_cores()} cores this process may use), got {self.workers}"
            )

    def shard_size(self, corpus: Corpus) -> int:
        """Tokens per shard; for one shard per split, more than the corpus can give (a byte-level token is
        at least one byte of text, plus one ``<|endoftext|>`` per document). The buffer is allocated, not
        touched, so only the tokens written take memory; a tokenizer that beats the bound adds a shard."""
        if self.shard_tokens is not None:
            return self.shard_tokens
        return max(MIN_SHARD_TOKENS, corpus.total_bytes() + len(corpus.relative_names()) + 1)


@dataclass
class TokenizeReport:
    """What a run did: the final manifest, shards written now and before, bad records with examples."""

    directory: Path
    manifest: dict[str, Any]
    shards_before: int
    shards_written: int
    seconds: float
    bad_examples: dict[str, list[str]]

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete"))
