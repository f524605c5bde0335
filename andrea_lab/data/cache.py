"""A cache of tokenized corpora, so only the first run pays for BPE training.

A small text corpus (``stdlib``, text files, a directory or glob of them) is tokenized whole into an
entry ``<cache_root>/tokens-<key[:16]>/``: a shard directory of the one layout and manifest schema
``andrea tokenize`` writes (shards.py), holding ``tokenizer.json``, ``train_000000.bin``,
``val_000000.bin`` and ``manifest.json``, read by the data module like any shard directory. What
differs is how the text was cut, and the manifest says so: split by document with at least one
document on each side (or, for one document, by position: split.py), and ``<|endoftext|>`` between
documents (``"end_of_text": "between documents"``), as these entries always were. A record corpus
(JSONL, Parquet, ``datasets``) is tokenized by ``andrea tokenize``'s own engine into
``<cache_root>/shards-<key[:16]>/`` (:func:`cached_shards`).

The key hashes everything that changes the result: the corpus fingerprint, the tokenizer's identity,
``vocab_size``, the split settings and the cache format. Entries of the earlier layout
(``<cache_root>/<key[:16]>/`` with ``train.bin``/``val.bin``) have other names: they are not found,
never read, and never deleted.

Safety rules:

* an entry is checked and built under a lock (``.<name>.lock`` beside it, ``filelock``), so fits
  started together build it once;
* an entry is built in a temporary sibling directory and renamed into place only when complete, so
  a crash never leaves a half-built entry (and a builder that takes no lock loses the race harmlessly);
* every load checks the manifest (every shard's size and sha256, read once per process: shard_check,
  and the tokenizer's hash); a damaged entry is reported with ``warnings.warn``, moved aside, deleted
  and rebuilt: never used silently.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np
from filelock import FileLock
from tokenizers import Tokenizer

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.corpus import Corpus, read_document
from andrea_lab.data.errors import CorpusError
from andrea_lab.data.shards import (
    MANIFEST_FILE,
    SHARD_FORMAT,
    SHARD_FORMAT_VERSION,
    TOKENIZER_FILE,
    TokenCorpus,
    shard_dir_corpus,
    shard_entry,
    shard_name,
    tokenizer_entry,
)
from andrea_lab.data.split import SPLIT_VERSION, split_documents, split_tokens
from andrea_lab.data.token_file import write_token_file
from andrea_lab.data.tokenize_corpus import TokenizeOptions, settings_of, tokenize_corpus
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.files import sha256_file, sha256_text, write_json_atomic

CACHE_FORMAT_VERSION = 2
CACHE_ENV_VAR = "ANDREA_LAB_CACHE"
ENTRY_PREFIX = "tokens-"
EOT_BETWEEN_DOCUMENTS = "between documents"


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


def default_cache_root(cache_dir: Optional[str] = None) -> Path:
    """``cache_dir`` if given, else ``$ANDREA_LAB_CACHE``, else ``~/.cache/andrea-lab``."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    return Path.home() / ".cache" / "andrea-lab"


def cache_settings(corpus_fingerprint: str, tokenizer: TokenizerSpec, vocab_size: int,
                   val_fraction: float) -> dict[str, Any]:
    """Everything that decides a small corpus's entry: its key hashes these, its manifest records them."""
    return {
        "format": CACHE_FORMAT_VERSION,
        "corpus": corpus_fingerprint,
        "tokenizer": tokenizer.identity(),
        "vocab_size": vocab_size,
        "val_fraction": repr(float(val_fraction)),
        "split": SPLIT_VERSION,
    }


def cache_key(corpus_fingerprint: str, tokenizer: TokenizerSpec, vocab_size: int, val_fraction: float) -> str:
    """The hex sha256 naming a cache entry; a tokenizer file counts by its content."""
    return sha256_text(json.dumps(cache_settings(corpus_fingerprint, tokenizer, vocab_size, val_fraction),
                                  sort_keys=True))


def load_or_build(
    corpus: Corpus,
    tokenizer_spec: Union[str, TokenizerSpec],
    vocab_size: int,
    val_fraction: float,
    cache_dir: Optional[str] = None,
) -> TokenizedCorpus:
    """Return the verified cache entry for these settings, building it if needed."""
    started = time.perf_counter()
    tokenizer = TokenizerSpec.of(tokenizer_spec)
    settings = cache_settings(corpus.fingerprint(), tokenizer, vocab_size, val_fraction)
    key = sha256_text(json.dumps(settings, sort_keys=True))
    directory = default_cache_root(cache_dir) / f"{ENTRY_PREFIX}{key[:16]}"
    with build_lock(directory):
        if directory.exists():
            try:
                tokens = verify_entry(directory, key)
                return TokenizedCorpus(tokens, hit=True, seconds=time.perf_counter() - started)
            except CacheCorruptError as problem:
                warnings.warn(f"tokenized corpus cache {directory} is damaged ({problem}); rebuilding it",
                              stacklevel=2)
                _discard(directory)
        tokens = _build_entry(corpus, tokenizer, vocab_size, val_fraction, settings, directory)
    return TokenizedCorpus(tokens, hit=False, seconds=time.perf_counter() - started)


def build_lock(directory: Path) -> FileLock:
    """The lock held while an entry is checked or built: fits started together on one corpus (a sweep's
    runs) build it once; the others wait, then find it. A hidden sibling file, so no entry holds it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(directory.with_name(f".{directory.name}.lock"))


def verify_entry(directory: Path, key: str) -> TokenCorpus:
    """The entry as tokens, checked as any shard directory is (manifest, every shard's size and sha256)
    and to be this key's, with its tokenizer; ``CacheCorruptError`` saying what is wrong."""
    try:
        tokens = shard_dir_corpus(directory)
    except CorpusError as problem:
        raise CacheCorruptError(str(problem)) from None
    manifest = tokens.manifest
    if manifest is None or manifest.get("key") != key:
        raise CacheCorruptError(f"{MANIFEST_FILE} is missing or belongs to another key")
    if len(tokens.train) != 1 or len(tokens.val) != 1:
        raise CacheCorruptError(f"{MANIFEST_FILE} lists {len(tokens.train)} train and {len(tokens.val)} val shards")
    try:
        tokenizer = tokenizers_lib.load_tokenizer(directory / TOKENIZER_FILE)
    except tokenizers_lib.TokenizerError as problem:
        raise CacheCorruptError(str(problem)) from None
    recorded = manifest.get("tokenizer")
    if not isinstance(recorded, dict) or sha256_text(tokenizer.to_str()) != recorded.get("sha256"):
        raise CacheCorruptError(f"{TOKENIZER_FILE} does not match its sha256 in the manifest")
    return tokens


def _build_entry(corpus: Corpus, spec: TokenizerSpec, vocab_size: int, val_fraction: float,
                 settings: dict[str, Any], directory: Path) -> TokenCorpus:
    """Tokenize the corpus into a temporary sibling, then rename it into place."""
    started = time.perf_counter()
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.building-", dir=directory.parent))
    try:
        names = corpus.relative_names()
        if len(names) >= 2:
            train_indices, val_indices = split_documents(names, val_fraction)
        else:
            train_indices, val_indices = list(range(len(names))), []
        # 'bpe' learns on the training documents only, so validation text stays unseen.
        tokenizer = spec.build(lambda: _documents(corpus, train_indices), vocab_size)
        tokenizers_lib.save_tokenizer(tokenizer, staging / TOKENIZER_FILE)
        train_tokens = tokenizers_lib.encode_documents(tokenizer, _documents(corpus, train_indices))
        if val_indices:
            val_tokens = tokenizers_lib.encode_documents(tokenizer, _documents(corpus, val_indices))
        else:
            train_tokens, val_tokens = split_tokens(train_tokens, val_fraction)
        shards = [_write_shard(staging, "train", train_tokens, len(train_indices), len(names)),
                  _write_shard(staging, "val", val_tokens, len(val_indices), len(names))]
        manifest = _manifest(corpus, tokenizer, settings, shards, {"train": train_indices, "val": val_indices})
        manifest["build_seconds"] = round(time.perf_counter() - started, 3)
        write_json_atomic(staging / MANIFEST_FILE, manifest)
        _publish(staging, directory, manifest["key"])
        return verify_entry(directory, manifest["key"])
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_shard(directory: Path, split: str, tokens: np.ndarray, documents: int, records: int) -> dict[str, Any]:
    name = shard_name(split, 0)
    write_token_file(directory / name, tokens)
    return shard_entry(name, split, 0, tokens, sha256_file(directory / name), documents, (records, 0), {})


def _manifest(corpus: Corpus, tokenizer: Tokenizer, settings: dict[str, Any], shards: list[dict[str, Any]],
              indices: dict[str, list[int]]) -> dict[str, Any]:
    """The shard directory manifest (shards.py's schema), with what only a small corpus's entry has: its
    key, the document names on each side, the corpus size, and where ``<|endoftext|>`` stands."""
    names = corpus.relative_names()
    totals: dict[str, Any] = {"records": len(names), "bad_records": {}}
    for shard in shards:
        totals[f"{shard['split']}_shards"] = 1
        totals[f"{shard['split']}_tokens"] = shard["tokens"]
        totals[f"{shard['split']}_documents"] = shard["documents"]
    return {
        "format": SHARD_FORMAT, "version": SHARD_FORMAT_VERSION, "complete": True, "corpus": corpus.description,
        "settings": settings, "tokenizer": tokenizer_entry(tokenizer), "shards": shards, "totals": totals,
        "key": sha256_text(json.dumps(settings, sort_keys=True)), "end_of_text": EOT_BETWEEN_DOCUMENTS,
        "corpus_bytes": corpus.total_bytes(),
        "train_documents": [names[index] for index in indices["train"]],
        "val_documents": [names[index] for index in indices["val"]],
    }


def _publish(staging: Path, directory: Path, key: str) -> None:
    """Rename the finished entry into place; if another builder won the race, keep theirs."""
    try:
        os.rename(staging, directory)
        return
    except OSError:
        if not directory.exists():
            raise
    try:
        verify_entry(directory, key)
    except CacheCorruptError:
        _discard(directory)
        os.rename(staging, directory)
        return
    shutil.rmtree(staging, ignore_errors=True)


def _documents(corpus: Corpus, indices: list[int]) -> Iterator[str]:
    for index in indices:
        yield read_document(corpus.files[index])


def _discard(directory: Path) -> None:
    """Move a damaged entry aside (atomic, so nobody else loads it), then delete it."""
    aside = directory.with_name(f".{directory.name}.damaged-{os.getpid()}-{time.time_ns()}")
    try:
        os.rename(directory, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def cached_shards(corpus: Corpus, tokenizer: TokenizerSpec, vocab_size: int, val_fraction: float, seed: int,
                  cache_dir: Optional[str] = None) -> TokenCorpus:
    """A record corpus (JSONL, Parquet, datasets) given straight to the data module: tokenized once by
    ``andrea tokenize``'s engine into a shard directory in the cache, then read like any shard directory.

    The directory is named by the tokenize settings (corpus fingerprint included), so a changed
    corpus or setting makes a new one; an interrupted build is resumed by the next run.
    """
    # workers=0: encode in this process (its Rayon threads use the cores): spawning workers from inside a
    # user's script would re-run a script that has no `if __name__ == "__main__"` guard.
    options = TokenizeOptions(tokenizer=tokenizer, vocab_size=vocab_size, seed=seed, val_fraction=val_fraction,
                              workers=0, progress=False)
    key = sha256_text(json.dumps(settings_of(corpus, options), sort_keys=True))
    directory = default_cache_root(cache_dir) / f"shards-{key[:16]}"
    with build_lock(directory):  # two writers of one shard directory would interleave their shards
        tokenize_corpus(corpus, directory, options)
    return shard_dir_corpus(directory)
