"""A cache of tokenized corpora, so only the first run pays for BPE training.

Each entry is a directory ``<cache_root>/<key[:16]>/`` holding
``tokenizer.json``, ``train.bin`` and ``val.bin`` (llm.c token files) and
``manifest.json`` (sizes and sha256 of each file, plus corpus statistics).
The key hashes everything that changes the result: the corpus fingerprint,
the tokenizer spec, ``vocab_size``, the split settings and the cache format.

Safety rules:

* an entry is checked and built under a lock (``.<key[:16]>.lock`` beside it,
  ``filelock``), so fits started together build it once;
* an entry is built in a temporary sibling directory and renamed into place
  only when complete, so a crash never leaves a half-built entry (and a
  builder that takes no lock, an older version, loses the race harmlessly);
* every load checks the manifest (sizes and sha256); a damaged entry is
  reported with ``warnings.warn``, moved aside, deleted and rebuilt: never
  used silently.
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

from filelock import FileLock

from andrea_lab.data import tokenizer as tokenizers_lib
from andrea_lab.data.corpus import Corpus, read_document
from andrea_lab.data.shards import MANIFEST_FILE, TOKENIZER_FILE, TokenCorpus, shard_dir_corpus
from andrea_lab.data.split import SPLIT_VERSION, split_documents, split_tokens
from andrea_lab.data.token_file import write_token_file
from andrea_lab.data.tokenize_corpus import TokenizeOptions, settings_of, tokenize_corpus
from andrea_lab.data.tokenizer_spec import TokenizerSpec
from andrea_lab.files import sha256_file, sha256_text, write_json_atomic

CACHE_FORMAT_VERSION = 1
CACHE_ENV_VAR = "ANDREA_LAB_CACHE"
TRAIN_FILE = "train.bin"
VAL_FILE = "val.bin"
_CHECKED_FILES = (TOKENIZER_FILE, TRAIN_FILE, VAL_FILE)


class CacheCorruptError(Exception):
    """An existing cache entry does not match its manifest (internal signal)."""


@dataclass(frozen=True)
class TokenizedCorpus:
    """A verified cache entry: where its files are and what its manifest says."""

    directory: Path
    manifest: dict[str, Any]
    hit: bool
    seconds: float

    @property
    def tokenizer_path(self) -> Path:
        return self.directory / TOKENIZER_FILE

    @property
    def train_path(self) -> Path:
        return self.directory / TRAIN_FILE

    @property
    def val_path(self) -> Path:
        return self.directory / VAL_FILE


def default_cache_root(cache_dir: Optional[str] = None) -> Path:
    """``cache_dir`` if given, else ``$ANDREA_LAB_CACHE``, else ``~/.cache/andrea-lab``."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    return Path.home() / ".cache" / "andrea-lab"


def cache_key(corpus_fingerprint: str, tokenizer: TokenizerSpec, vocab_size: int, val_fraction: float) -> str:
    """The hex sha256 naming a cache entry; a tokenizer file counts by its content."""
    fields = {
        "format": CACHE_FORMAT_VERSION,
        "corpus": corpus_fingerprint,
        "tokenizer": tokenizer.identity(),
        "vocab_size": vocab_size,
        "val_fraction": repr(float(val_fraction)),
        "split": SPLIT_VERSION,
    }
    return sha256_text(json.dumps(fields, sort_keys=True))


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
    key = cache_key(corpus.fingerprint(), tokenizer, vocab_size, val_fraction)
    root = default_cache_root(cache_dir)
    directory = root / key[:16]
    with build_lock(directory):
        if directory.exists():
            try:
                manifest = verify_entry(directory, key)
                return TokenizedCorpus(directory, manifest, hit=True, seconds=time.perf_counter() - started)
            except CacheCorruptError as problem:
                warnings.warn(f"tokenized corpus cache {directory} is damaged ({problem}); rebuilding it",
                              stacklevel=2)
                _discard(directory)
        manifest = _build_entry(corpus, tokenizer, vocab_size, val_fraction, key, directory)
    return TokenizedCorpus(directory, manifest, hit=False, seconds=time.perf_counter() - started)


def build_lock(directory: Path) -> FileLock:
    """The lock held while an entry is checked or built: fits started together on one corpus (a sweep's
    runs) build it once; the others wait, then find it. A hidden sibling file, so no entry holds it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(directory.with_name(f".{directory.name}.lock"))


def verify_entry(directory: Path, key: str) -> dict[str, Any]:
    """Check an entry against its manifest; raise ``CacheCorruptError`` saying what is wrong."""
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CacheCorruptError(f"{MANIFEST_FILE} is missing or unreadable: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("key") != key:
        raise CacheCorruptError(f"{MANIFEST_FILE} belongs to another key")
    recorded = manifest.get("files")
    for name in _CHECKED_FILES:
        path = directory / name
        expected = recorded.get(name) if isinstance(recorded, dict) else None
        if not isinstance(expected, dict) or not path.is_file():
            raise CacheCorruptError(f"{name} is missing, or its manifest record is")
        size = path.stat().st_size
        if size != expected.get("bytes"):
            raise CacheCorruptError(f"{name} is {size} bytes, the manifest says {expected['bytes']}")
        if sha256_file(path) != expected.get("sha256"):
            raise CacheCorruptError(f"{name} does not match its sha256 in the manifest")
    return manifest


def _build_entry(
    corpus: Corpus,
    tokenizer_spec: TokenizerSpec,
    vocab_size: int,
    val_fraction: float,
    key: str,
    directory: Path,
) -> dict[str, Any]:
    """Tokenize the corpus into a temporary sibling, then rename it into place."""
    started = time.perf_counter()
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.building-", dir=directory.parent))
    try:
        names = corpus.relative_names()
        multi_document = len(names) >= 2
        if multi_document:
            train_indices, val_indices = split_documents(names, val_fraction)
        else:
            train_indices, val_indices = list(range(len(names))), []

        # 'bpe' learns on the training documents only, so validation text stays unseen.
        tokenizer = tokenizer_spec.build(lambda: _documents(corpus, train_indices), vocab_size)
        tokenizers_lib.save_tokenizer(tokenizer, staging / TOKENIZER_FILE)
        train_tokens = tokenizers_lib.encode_documents(tokenizer, _documents(corpus, train_indices))
        if multi_document:
            val_tokens = tokenizers_lib.encode_documents(tokenizer, _documents(corpus, val_indices))
        else:
            train_tokens, val_tokens = split_tokens(train_tokens, val_fraction)
        write_token_file(staging / TRAIN_FILE, train_tokens)
        write_token_file(staging / VAL_FILE, val_tokens)

        manifest = {
            "key": key,
            "format": CACHE_FORMAT_VERSION,
            "corpus": corpus.description,
            "tokenizer": str(tokenizer_spec),
            "vocab_size": tokenizer.get_vocab_size(),
            "eot_id": tokenizers_lib.eot_id(tokenizer),
            "val_fraction": val_fraction,
            "documents": len(names),
            "corpus_bytes": corpus.total_bytes(),
            "train_documents": [names[index] for index in train_indices],
            "val_documents": [names[index] for index in val_indices],
            "train_tokens": int(len(train_tokens)),
            "val_tokens": int(len(val_tokens)),
            "build_seconds": round(time.perf_counter() - started, 3),
            "files": {name: _describe(staging / name) for name in _CHECKED_FILES},
        }
        write_json_atomic(staging / MANIFEST_FILE, manifest)
        return _publish(staging, directory, key, manifest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _publish(staging: Path, directory: Path, key: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Rename the finished entry into place; if another process won the race, keep theirs."""
    try:
        os.rename(staging, directory)
        return manifest
    except OSError:
        if not directory.exists():
            raise
    try:
        theirs = verify_entry(directory, key)
    except CacheCorruptError:
        _discard(directory)
        os.rename(staging, directory)
        return manifest
    shutil.rmtree(staging, ignore_errors=True)
    return theirs


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


def _describe(path: Path) -> dict[str, Any]:
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


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
