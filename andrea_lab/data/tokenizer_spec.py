"""The tokenizer a user names (``data.tokenizer``, ``andrea tokenize --tokenizer``), resolved once.

The spec is a string in YAML and on the command line, ``bpe``, ``byte`` or a path to a
``tokenizer.json``, so that configurations stay serialisable; everything that depends on which of
the three it is (the vocabulary it can have, its identity in a cache key, how it is made, which
tokenizer a pre-tokenized corpus decodes with) lives on :class:`TokenizerSpec`, so no other module
compares the string again. The data module, the cache and ``andrea tokenize`` all take the parsed
value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from tokenizers import Tokenizer

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.tokenizer import BYTE_VOCAB_SIZE, END_OF_TEXT, UINT16_VOCAB_LIMIT, TokenizerError
from andrea_lab.files import sha256_file, sha256_text

BPE, BYTE, FILE = "bpe", "byte", "file"


@dataclass(frozen=True)
class TokenizerSpec:
    """``bpe`` (learn one), ``byte`` (the fixed 257-id tokenizer) or ``file`` (a given tokenizer.json)."""

    kind: str
    path: Optional[Path] = None

    @classmethod
    def of(cls, spec: Union[str, "TokenizerSpec"]) -> "TokenizerSpec":
        """The spec as a value (itself if it is one already); a path must name an existing file (one line
        saying so if not)."""
        if isinstance(spec, TokenizerSpec):
            return spec
        if spec in (BPE, BYTE):
            return cls(str(spec))
        path = Path(spec).expanduser() if isinstance(spec, str) and spec.strip() else None
        if path is None or not path.is_file():
            raise TokenizerError(f"tokenizer {spec!r} is not 'bpe', 'byte', or an existing tokenizer.json file")
        return cls(FILE, path)

    @property
    def learned(self) -> bool:
        """Whether the tokenizer is learned from the corpus (its vocabulary size is then a setting)."""
        return self.kind == BPE

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else self.kind

    def identity(self) -> str:
        """What the tokenizer is for a cache key: the kind, or a file by its content (not its name)."""
        return self.kind if self.path is None else "file:" + sha256_file(self.path)

    def check_model_vocab(self, vocab_size: int) -> None:
        """The model's ``vocab_size`` can hold every id: exactly 257 for ``byte``, the learned size for
        ``bpe``, at least the file's ids for a tokenizer.json."""
        if self.kind == BYTE and vocab_size != BYTE_VOCAB_SIZE:
            raise TokenizerError(
                f"tokenizer 'byte' has {BYTE_VOCAB_SIZE} ids but vocab_size is {vocab_size}; "
                f"set model.config.vocab_size: {BYTE_VOCAB_SIZE}"
            )
        if self.kind == BPE:
            check_bpe_vocab(vocab_size, "vocab_size")
        if self.kind == FILE:
            size = self.load_file().get_vocab_size()
            if size > vocab_size:
                raise TokenizerError(
                    f"tokenizer {self.path} has {size} ids but vocab_size is only {vocab_size}; "
                    f"set model.config.vocab_size: {size}"
                )

    def check_shard_vocab(self, vocab_size: int) -> None:
        """Every id fits a uint16 shard: the BPE to learn, or the given file (``byte`` always does)."""
        if self.kind == BPE:
            check_bpe_vocab(vocab_size, "--vocab-size")
        if self.kind == FILE:
            size = self.load_file().get_vocab_size()
            if size > UINT16_VOCAB_LIMIT:
                raise TokenizerError(
                    f"tokenizer {self.path} has {size} ids; llm.c shards store uint16, so at most {UINT16_VOCAB_LIMIT}"
                )

    def build(self, training_documents: Callable[[], Iterable[str]], vocab_size: int) -> Tokenizer:
        """The tokenizer itself: a BPE learned on ``training_documents()`` (called only for ``bpe``), the
        byte tokenizer, or the file."""
        if self.kind == BPE:
            return tokenizers_lib.train_bpe_tokenizer(training_documents(), vocab_size)
        if self.kind == BYTE:
            return tokenizers_lib.byte_tokenizer()
        return self.load_file()

    def for_tokens(self, own: Optional[Path], own_sha256: Optional[str]) -> Optional[Tokenizer]:
        """The tokenizer of an already tokenized corpus whose own tokenizer.json (a shard directory's) is
        ``own``, or None when nothing says which one made the ids (an llm.c token file with ``bpe``).

        ``bpe`` means "the corpus's own"; a given file must be that one (by hash); ``byte`` is taken at
        its word, as the ids of a token file cannot say which tokenizer made them.
        """
        if self.kind == BYTE:
            return tokenizers_lib.byte_tokenizer()
        if self.kind == BPE:
            return None if own is None else tokenizers_lib.load_tokenizer(own)
        given = self.load_file()
        if own is not None and sha256_text(given.to_str()) != own_sha256:
            raise TokenizerError(
                f"tokenizer {self.path} is not the one that made {own.parent} (its {own.name}); "
                "leave data.tokenizer at 'bpe' to use that one"
            )
        return given

    def load_file(self) -> Tokenizer:
        """The given tokenizer.json (only for kind ``file``)."""
        if self.path is None:
            raise TokenizerError(f"tokenizer {self.kind!r} is not a file")
        return tokenizers_lib.load_tokenizer(self.path)


def check_bpe_vocab(vocab_size: int, name: str) -> None:
    """A learned byte-level BPE has the 256 bytes and <|endoftext|>, and ids that fit uint16 token files."""
    if not BYTE_VOCAB_SIZE <= vocab_size <= UINT16_VOCAB_LIMIT:
        raise TokenizerError(
            f"tokenizer 'bpe' needs {name} between {BYTE_VOCAB_SIZE} (256 bytes + {END_OF_TEXT}) "
            f"and {UINT16_VOCAB_LIMIT} (uint16 token files), got {vocab_size}"
        )
