"""Byte-level tokenizers built on Hugging Face ``tokenizers``.

Both tokenizers here are real ``tokenizers.Tokenizer`` objects, so a
checkpoint can carry its tokenizer as one JSON string and any tool that
reads ``tokenizer.json`` can use it. Both are byte-level: every string maps
to bytes first, so any Unicode text round-trips exactly and there is no
unknown token.

* ``train_bpe_tokenizer``: GPT-2-style byte-level BPE learned on the corpus.
  Ids 0..255 are the 256 byte symbols, then the learned merges, and the last
  id (``vocab_size - 1``) is ``<|endoftext|>``.
* ``byte_tokenizer``: no merges at all, 257 ids: id ``b`` is byte ``b`` and
  id 256 is ``<|endoftext|>``. A baseline that needs no training.

``<|endoftext|>`` only ever comes from joining documents: encoding text that
happens to contain that literal string yields its ordinary bytes, so
the end-of-text id in a token stream always marks a real document boundary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Optional, Union

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from andrea_lab.errors import UsageError
from andrea_lab.files import atomic_write

END_OF_TEXT = "<|endoftext|>"
BYTE_VOCAB_SIZE = 257
UINT16_VOCAB_LIMIT = 65536  # llm.c token files store ids as uint16

PathLike = Union[str, "os.PathLike[str]"]


class TokenizerError(UsageError):
    """A tokenizer cannot be built, loaded or used as asked."""


class VocabularyTooLarge(TokenizerError):
    """The corpus has too few distinct pairs for a BPE of ``requested`` ids: it reached ``reached``."""

    def __init__(self, message: str, requested: int, reached: int):
        super().__init__(message)
        self.requested, self.reached = requested, reached


def byte_symbols() -> list[str]:
    """The 256 printable symbols that stand for bytes 0..255, GPT-2's mapping.

    Printable Latin-1 bytes stand for themselves; the others (controls,
    space, a few more) are moved to code points from 256 up, so every byte
    has a visible, non-whitespace symbol that BPE can treat as a character.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    kept = set(printable)
    symbols = {}
    shifted = 0
    for byte in range(256):
        if byte in kept:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + shifted)
            shifted += 1
    return [symbols[byte] for byte in range(256)]


def train_bpe_tokenizer(documents: Iterable[str], vocab_size: int) -> Tokenizer:
    """Learn a byte-level BPE with exactly ``vocab_size`` ids from ``documents``.

    The vocabulary is the 256 byte symbols (always, even for bytes the corpus
    never uses, so nothing is ever unknown), ``vocab_size - 257`` merged
    tokens, and ``<|endoftext|>`` as the last id. Raises ``TokenizerError``
    when the corpus has too few distinct pairs to learn that many merges.
    """
    if vocab_size < BYTE_VOCAB_SIZE:
        raise TokenizerError(
            f"a byte-level BPE needs vocab_size >= {BYTE_VOCAB_SIZE} (256 bytes + {END_OF_TEXT}), got {vocab_size}"
        )
    tokenizer = _empty_byte_level(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,  # the end-of-text token is appended after training, as the last id
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer)
    learned = tokenizer.get_vocab_size()
    if learned != vocab_size - 1:
        reached = learned + 1
        raise VocabularyTooLarge(
            f"the corpus is too small to learn a {vocab_size}-id BPE: it only reached {reached} ids "
            f"(256 bytes + {reached - BYTE_VOCAB_SIZE} merges + {END_OF_TEXT}); "
            f"use vocab_size <= {reached}, or tokenizer 'byte' with vocab_size {BYTE_VOCAB_SIZE}",
            vocab_size,
            reached,
        )
    _add_end_of_text(tokenizer)
    return _checked(tokenizer, vocab_size)


def byte_tokenizer() -> Tokenizer:
    """A 257-id byte tokenizer: id ``b`` is byte ``b``, id 256 is ``<|endoftext|>``.

    It is a BPE model whose vocabulary is the byte alphabet and which has no
    merges, so it behaves exactly like the trained tokenizer minus the merges.
    """
    vocab = {symbol: byte for byte, symbol in enumerate(byte_symbols())}
    tokenizer = _empty_byte_level(models.BPE(vocab=vocab, merges=[]))
    _add_end_of_text(tokenizer)
    return _checked(tokenizer, BYTE_VOCAB_SIZE)


def load_tokenizer(path: PathLike) -> Tokenizer:
    """Load a ``tokenizer.json``; it must define ``<|endoftext|>``."""
    path = Path(path)
    if not path.is_file():
        raise TokenizerError(f"tokenizer file {path} does not exist")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on bad JSON
        raise TokenizerError(f"{path} is not a valid tokenizer.json: {error}") from None
    return _prepared(tokenizer, origin=str(path))


def tokenizer_from_json(text: str) -> Tokenizer:
    """Rebuild a tokenizer from ``Tokenizer.to_str()`` output (as stored in checkpoints)."""
    return _prepared(Tokenizer.from_str(text), origin="the tokenizer JSON")


def save_tokenizer(tokenizer: Tokenizer, path: PathLike) -> None:
    """Write ``tokenizer.json`` atomically (a reader never sees half of it)."""
    text = tokenizer.to_str(pretty=True)
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def token_byte_lengths(tokenizer: Tokenizer) -> Optional[list[int]]:
    """How many bytes of text each id stands for, by id (special tokens: 0), for a byte-level tokenizer (the
    ``bpe`` and ``byte`` ones made here, GPT-2's): each symbol of a byte-level token is one byte. None for a
    tokenizer whose tokens are not byte-level (a loss per byte is then not defined by its tokens alone)."""
    if not _decodes_byte_level(tokenizer):
        return None
    symbols = set(byte_symbols())
    special = {added.content for added in tokenizer.get_added_tokens_decoder().values() if added.special}
    lengths = [0] * tokenizer.get_vocab_size()
    for token, token_id in tokenizer.get_vocab().items():
        if token in special:
            continue
        if not set(token) <= symbols or token_id >= len(lengths):
            return None
        lengths[token_id] = len(token)
    return lengths


def _decodes_byte_level(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's decoder is GPT-2's byte-level one (alone or in a sequence): only then does each
    symbol of a token stand for one byte."""
    decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    return any(part.get("type") == "ByteLevel" for part in parts)


def eot_id(tokenizer: Tokenizer) -> int:
    """The id of ``<|endoftext|>`` (``vocab_size - 1`` for tokenizers made here)."""
    token_id = tokenizer.token_to_id(END_OF_TEXT)
    if token_id is None:
        raise TokenizerError(f"the tokenizer has no {END_OF_TEXT} token")
    return token_id


def _empty_byte_level(model: models.Model) -> Tokenizer:
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _add_end_of_text(tokenizer: Tokenizer) -> None:
    tokenizer.add_special_tokens([AddedToken(END_OF_TEXT, special=True, normalized=False)])


def _prepared(tokenizer: Tokenizer, origin: str) -> Tokenizer:
    """Apply the runtime settings that ``tokenizer.json`` does not store."""
    if tokenizer.token_to_id(END_OF_TEXT) is None:
        raise TokenizerError(f"{origin} has no {END_OF_TEXT} token, which separates documents")
    # Literal "<|endoftext|>" in text encodes as ordinary bytes: the id is reserved for real boundaries.
    tokenizer.encode_special_tokens = True
    return probed(tokenizer, origin)


#: Text a tokenizer must encode and decode when it is loaded: code, prose, non-ASCII, whitespace runs.
PROBE_TEXT = "def f(x):\n    return x  # Über café 東京 🙂\n\n\tend <|endoftext|>"


def probed(tokenizer, origin: str):
    """``tokenizer`` once it has encoded and decoded :data:`PROBE_TEXT`: a handed tokenizer.json whose rules
    make the Rust library fail (an error, or a panic: pyo3's PanicException derives from BaseException) is
    refused here, where it is loaded, with one line, not later in the middle of a fit or a generation."""
    try:
        tokenizer.decode(tokenizer.encode(PROBE_TEXT).ids)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: B036 - the Rust panic is a BaseException
        raise TokenizerError(
            f"{origin} fails on ordinary text ({type(error).__name__}: {str(error)[:200]}); "
            "it cannot tokenize a corpus: use another tokenizer.json, or bpe/byte"
        ) from None
    return tokenizer


def _checked(tokenizer: Tokenizer, vocab_size: int) -> Tokenizer:
    actual = tokenizer.get_vocab_size()
    if actual != vocab_size or eot_id(tokenizer) != vocab_size - 1:
        raise TokenizerError(
            f"internal error: built a tokenizer with {actual} ids and {END_OF_TEXT} at "
            f"{tokenizer.token_to_id(END_OF_TEXT)}, expected {vocab_size} ids with it last"
        )
    return _prepared(tokenizer, origin="the new tokenizer")
