"""Data for ANDREA: corpora, tokenizers, the tokenized cache, and the DataModule.

A corpus spec resolves (corpus.py) to a ``Corpus`` (a source of text: documents as one stream of
records, records.py) or a ``TokenCorpus`` (shards.py: token files already). Every ``Corpus`` goes
through the one tokenize pipeline (tokenize_corpus.py: the tokenizer spec parsed once,
tokenizer_spec.py; encoding, parallel_encode.py; llm.c shards, shard_writer.py), into a directory
``andrea tokenize`` names or into the cache (cache.py); the data module (datamodule.py) reads only
token shards or an llm.c token file, as deterministic windows (windows.py, heldout.py).

``AndreaDataModule`` is imported lazily: it pulls in Lightning (seconds to
import), which tools that only read token files or tokenizers do not need.
"""

from typing import Any

from andrea_lab.data.corpus import Corpus, CorpusError, TokenCorpus, resolve_corpus
from andrea_lab.data.settings import DataConfigError
from andrea_lab.data.token_file import TokenFileError, read_token_file, write_token_file
from andrea_lab.data.tokenizer import END_OF_TEXT, TokenizerError, byte_tokenizer, load_tokenizer, train_bpe_tokenizer
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
        # Lightning: the tokenizer's workers and `andrea tokenize` need none
        from andrea_lab.data.datamodule import AndreaDataModule

        return AndreaDataModule
    raise AttributeError(f"module 'andrea_lab.data' has no attribute {name!r}")
