"""Data for ANDREA: corpora, tokenizers, the tokenized cache, and the DataModule.

The pipeline is corpus spec -> ``Corpus`` (corpus.py: a source of text) or
``TokenCorpus`` (shards.py: token files already) -> tokenizer (the spec parsed
once, tokenizer_spec.py; tokenizer.py) -> cached llm.c token files (cache.py,
token_file.py) -> deterministic windows (windows.py) -> ``AndreaDataModule``
(datamodule.py).

At scale, ``andrea tokenize`` (tokenize_corpus.py) streams record files
(records.py: JSONL, Parquet, ``datasets``) through worker processes
(parallel_encode.py) into fixed-size llm.c shards (shard_writer.py) that the
data module reads as one stream (shards.py, ``ConcatenatedTokens``).

``AndreaDataModule`` is imported lazily: it pulls in Lightning (seconds to
import), which tools that only read token files or tokenizers do not need.
"""

from typing import Any

from andrea_lab.data.corpus import Corpus, CorpusError, TokenCorpus, resolve_corpus
from andrea_lab.data.settings import DataConfigError
from andrea_lab.data.token_file import TokenFileError, read_token_file, write_token_file
from andrea_lab.data.tokenizer import (
    END_OF_TEXT,
    TokenizerError,
    byte_tokenizer,
    load_tokenizer,
    train_bpe_tokenizer,
)
from andrea_lab.data.tokenizer_spec import TokenizerSpec

__all__ = [
    "END_OF_TEXT",
    "AndreaDataModule",
    "Corpus",
    "CorpusError",
    "DataConfigError",
    "TokenCorpus",
    "TokenFileError",
    "TokenizerError",
    "TokenizerSpec",
    "byte_tokenizer",
    "load_tokenizer",
    "read_token_file",
    "resolve_corpus",
    "train_bpe_tokenizer",
    "write_token_file",
]


def __getattr__(name: str) -> Any:
    if name == "AndreaDataModule":
        from andrea_lab.data.datamodule import AndreaDataModule

        return AndreaDataModule
    raise AttributeError(f"module 'andrea_lab.data' has no attribute {name!r}")
