"""A cache of tokenized corpora, so only the first run pays for tokenizing.

Every text corpus given to the data module (``stdlib``, a text file, a directory or glob of them,
JSONL/Parquet records, a datasets directory) goes through the one tokenize pipeline
(tokenize_corpus.py) into an entry ``<cache_root>/tokens-<key[:16]>/``: a shard directory of the
layout and manifest schema ``andrea tokenize`` writes (shards.py), read like any shard directory.
The rules the pipeline takes are chosen here, once, by what the source is (:func:`options_for`):
a small text corpus keeps the rules its entries always had (split by document name with at least
one document on each side, the BPE on every training document, ``<|endoftext|>`` between documents,
one shard per split); records are split by key and the BPE learns on a seeded sample.

The key is the sha256 of the manifest's ``settings`` (tokenize_corpus.settings_of: the corpus
fingerprint, the tokenizer's identity, every rule). Entries of earlier layouts (``<key[:16]>/``
with ``train.bin``, ``tokens-``/``shards-`` entries keyed by earlier settings) have other names:
they are not found, never read, and never deleted.

Safety rules:

* an entry is checked and built under a lock (``.<name>.lock`` beside it, ``filelock``), so fits
  started together build it once;
* it is built in place by the pipeline, whose manifest names a shard only once the shard is whole
  and says ``complete`` only at the end: an interrupted build is an unfinished entry, resumed (or
  for one shard per split, redone) by the next run, never read as an entry;
* every load checks the manifest (every shard's size and sha256, read once per process: shard_check,
  and the tokenizer's hash); a damaged entry is reported with ``warnings.warn``, moved aside, deleted
  and rebuilt: never used silently.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from filelock import FileLock

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.cache_root import default_cache_root
from andrea_lab.data.corpus import Corpus
from andrea_lab.data.errors import CorpusError
from andrea_lab.data.shards import MANIFEST_FILE, TOKENIZER_FILE, TokenCorpus, read_manifest, shard_dir_corpus
from andrea_lab.data.tokenize_corpus import settings_of, tokenize_corpus
from andrea_lab.data.tokenize_options import TokenizeError, TokenizeOptions
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.files import sha256_text

ENTRY_PREFIX = "tokens-"
#: The BPE sample's seed when none is given (the data module passes its own).
DEFAULT_SEED = TokenizeOptions.seed


class CacheCorruptError(Exception):
    """An existing cache entry does not match its manifest (internal signal)."""


@dataclass(frozen=True)
class TokenizedCorpus:
    """A verified cache entry: its shard directory as tokens, what its manifest says, how it was had."""

    tokens: TokenCorpus
    hit: bool
    seconds: float

    @property
    def directory(self) -> Path:
        return self.tokens.root

    @property
    def manifest(self) -> dict[str, Any]:
        assert self.tokens.manifest is not None
        return self.tokens.manifest

    @property
    def tokenizer_path(self) -> Path:
        return self.directory / TOKENIZER_FILE

    @property
    def train_path(self) -> Path:
        return self.tokens.train[0]

    @property
    def val_path(self) -> Path:
        return self.tokens.val[0]


def options_for(
    corpus: Corpus, tokenizer: Union[str, TokenizerSpec], vocab_size: int, val_fraction: float, seed: int = DEFAULT_SEED
) -> TokenizeOptions:
    """The pipeline's rules for this source: records as ``andrea tokenize`` splits them (by key, the BPE
    on a sample seeded by ``seed``), a small text corpus as its entries always were. Encoded in this
    process either way: workers spawned from a user's script would re-run a script that has no
    ``if __name__ == "__main__"`` guard."""
    if not corpus.is_records:
        return TokenizeOptions.whole_documents(TokenizerSpec.of(tokenizer), vocab_size, val_fraction)
    return TokenizeOptions(
        tokenizer=tokenizer, vocab_size=vocab_size, seed=seed, val_fraction=val_fraction, workers=0, progress=False
    )


def cache_key(settings: dict[str, Any]) -> str:
    """The hex sha256 naming a cache entry: of the settings its manifest records (settings_of)."""
    return sha256_text(json.dumps(settings, sort_keys=True))


def load_or_build(
    corpus: Corpus,
    tokenizer_spec: Union[str, TokenizerSpec],
    vocab_size: int,
    val_fraction: float,
    cache_dir: Optional[str] = None,
    seed: int = DEFAULT_SEED,
) -> TokenizedCorpus:
    """Return the verified cache entry for these settings, building (or finishing) it if needed. A build
    whose BPE cannot learn ``vocab_size`` ids leaves no entry (VocabularyTooLarge, raised)."""
    started = time.perf_counter()
    options = options_for(corpus, tokenizer_spec, vocab_size, val_fraction, seed)
    settings = settings_of(corpus, options)  # once: the key, and the manifest the pipeline writes
    key = cache_key(settings)
    directory = _entry_directory(key, cache_dir)
    with build_lock(directory):
        if directory.exists() and not _resumable(directory, key):
            try:
                tokens = verify_entry(directory, key)
                return TokenizedCorpus(tokens, hit=True, seconds=time.perf_counter() - started)
            except CacheCorruptError as problem:
                warnings.warn(f"tokenized corpus cache {directory} is damaged ({problem}); rebuilding it", stacklevel=2)
                _discard(directory)
        _say_building(corpus, tokenizer_spec, directory)
        try:
            tokenize_corpus(corpus, directory, options, settings)
        except tokenizers_lib.VocabularyTooLarge:
            _discard(directory)  # holds nothing but the failed attempt's manifest
            raise
        except (CorpusError, TokenizeError) as problem:  # an unfinished entry that cannot be continued
            if not _resumable(directory, key):
                raise
            warnings.warn(
                f"tokenized corpus cache {directory} cannot be finished ({problem}); rebuilding it", stacklevel=2
            )
            _discard(directory)
            tokenize_corpus(corpus, directory, options, settings)
        tokens = verify_entry(directory, key)
    return TokenizedCorpus(tokens, hit=False, seconds=time.perf_counter() - started)


def _entry_directory(key: str, cache_dir: Optional[str]) -> Path:
    return default_cache_root(cache_dir) / f"{ENTRY_PREFIX}{key[:16]}"


def has_entry(
    corpus: Corpus,
    tokenizer_spec: Union[str, TokenizerSpec],
    vocab_size: int,
    val_fraction: float,
    cache_dir: Optional[str] = None,
    seed: int = DEFAULT_SEED,
) -> bool:
    """Whether a finished entry for these settings is in the cache (its manifest says so; not verified: the
    load verifies it), without building anything."""
    settings = settings_of(corpus, options_for(corpus, tokenizer_spec, vocab_size, val_fraction, seed))
    directory = _entry_directory(cache_key(settings), cache_dir)
    try:
        manifest = read_manifest(directory) if directory.is_dir() else None
    except CorpusError:
        return False
    return manifest is not None and manifest.get("complete") is True


def _say_building(corpus: Corpus, tokenizer_spec: Union[str, TokenizerSpec], directory: Path) -> None:
    """One line before the silent seconds of a first use (training a BPE, encoding every document): what is
    being done, that it happens once, and where the result is kept."""
    training = " (training its BPE tokenizer first)" if TokenizerSpec.of(tokenizer_spec).kind == "bpe" else ""
    print(
        f"tokenizing {corpus.description}{training}: once for these settings, cached in {directory}",
        file=sys.stderr,
        flush=True,
    )


def build_lock(directory: Path) -> FileLock:
    """The lock held while an entry is checked or built: fits started together on one corpus (a sweep's
    runs) build it once; the others wait, then find it. A hidden sibling file, so no entry holds it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(directory.with_name(f".{directory.name}.lock"))


def _resumable(directory: Path, key: str) -> bool:
    """Whether the entry is a build of this key the pipeline stopped before its end (``complete`` false):
    continued, not verified. Anything else there is verified (and rebuilt if damaged)."""
    try:
        manifest = read_manifest(directory)
    except CorpusError:
        return False
    settings = None if manifest is None else manifest.get("settings")
    return (
        manifest is not None
        and manifest.get("complete") is False
        and isinstance(settings, dict)
        and cache_key(settings) == key
    )


def verify_entry(directory: Path, key: str) -> TokenCorpus:
    """The entry as tokens, checked as any shard directory is (manifest, every shard's size and sha256)
    and to be this key's, with its tokenizer; ``CacheCorruptError`` saying what is wrong."""
    try:
        tokens = shard_dir_corpus(directory)
    except CorpusError as problem:
        raise CacheCorruptError(str(problem)) from None
    manifest = tokens.manifest
    settings = None if manifest is None else manifest.get("settings")
    if not isinstance(settings, dict) or cache_key(settings) != key:
        raise CacheCorruptError(f"{MANIFEST_FILE} is missing or belongs to another key")
    if not tokens.train or not tokens.val:
        raise CacheCorruptError(f"{MANIFEST_FILE} lists {len(tokens.train)} train and {len(tokens.val)} val shards")
    try:
        tokenizer = tokenizers_lib.load_tokenizer(directory / TOKENIZER_FILE)
    except tokenizers_lib.TokenizerError as problem:
        raise CacheCorruptError(str(problem)) from None
    recorded = manifest.get("tokenizer")
    if not isinstance(recorded, dict) or sha256_text(tokenizer.to_str()) != recorded.get("sha256"):
        raise CacheCorruptError(f"{TOKENIZER_FILE} does not match its sha256 in the manifest")
    return tokens


def _discard(directory: Path) -> None:
    """Move a damaged entry aside (atomic, so nobody else loads it), then delete it."""
    aside = directory.with_name(f".{directory.name}.damaged-{os.getpid()}-{time.time_ns()}")
    try:
        os.rename(directory, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)
