"""What the tokens are: a :class:`TokenCorpus` of token files, and the shard directory layout.

A shard directory (what ``andrea tokenize`` writes, and what the data module reads) holds

* ``tokenizer.json``: the tokenizer that made the ids;
* ``train_NNNNNN.bin`` / ``val_NNNNNN.bin``: llm.c token files of exactly ``shard_tokens`` tokens each
  (the last of a split may be shorter), each document followed by ``<|endoftext|>``; a document that
  does not fit the rest of a shard continues in the next one, as in llm.c's shards;
* ``manifest.json``: the settings, the tokenizer's sha256, the corpus fingerprint, and per shard its
  size, token and document counts, sha256, largest id, and where in the corpus it ends (for resume);
  ``complete`` is true once every record has been read.

The data module also reads shard directories that have no manifest (llm.c's FineWeb output), globs
of ``.bin`` files (names containing ``train`` are training shards, ``val`` validation ones) and one
llm.c token file (with the ``*_val*.bin`` beside it, if any). Sources of text (corpus.py) are the
other kind of corpus; this module does not import them.
"""

from __future__ import annotations

import glob
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from tokenizers import Tokenizer

from andrea_lab.data.errors import CorpusError
from andrea_lab.data.shard_check import check_manifest, scan_shard, shards_fingerprint, verify_shards
from andrea_lab.data.token_file import HEADER_BYTES, is_token_file
from andrea_lab.data.tokenizer import eot_id
from andrea_lab.files import HandedFileError, hash_named_file, load_json, sha256_text

MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
SHARD_FORMAT = "andrea-shards"
SHARD_FORMAT_VERSION = 1
SPLITS = ("train", "val")


@dataclass
class TokenCorpus:
    """A corpus that is already token ids: its train and validation token files.

    ``manifest`` is the ``andrea tokenize`` manifest of a shard directory (None for llm.c files, which
    carry none); ``named_file`` marks one token file named alone, whose validation is its ``*_val*``
    sibling or, without one, the end of its own stream.
    """

    train: list[Path]
    val: list[Path]
    description: str
    root: Path
    manifest: Optional[dict[str, Any]] = field(default=None, repr=False)
    named_file: bool = False
    _fingerprint: Optional[str] = field(default=None, repr=False, compare=False)

    @property
    def own_tokenizer(self) -> Optional[Path]:
        """The tokenizer.json that made the ids (a shard directory's), or None when nothing says."""
        return None if self.manifest is None else self.root / TOKENIZER_FILE

    @property
    def own_tokenizer_sha256(self) -> Optional[str]:
        return None if self.manifest is None else (self.manifest.get("tokenizer") or {}).get("sha256")

    def total_bytes(self) -> int:
        """Size of the token files on disk."""
        return sum(path.stat().st_size for path in [*self.train, *self.val])

    def fingerprint(self) -> str:
        """The corpus hash a run records: a named token file by its bytes; shards by the sha256 read
        from each (shard_check), never by a manifest's claim."""
        if self._fingerprint is None:
            if self.named_file:
                digest = hashlib.sha256(b"token-file\0")
                hash_named_file(digest, self.train[0].name, self.train[0])
                self._fingerprint = digest.hexdigest()
            else:
                self._fingerprint = shards_fingerprint(
                    [(path.name, scan_shard(path)) for path in [*self.train, *self.val]]
                )
        return self._fingerprint


def shard_name(split: str, index: int) -> str:
    """``train_000000.bin``: llm.c's naming, so its tools (and ours) tell the splits apart by name."""
    return f"{split}_{index:06d}.bin"


def shard_entry(
    name: str,
    split: str,
    index: int,
    tokens: np.ndarray,
    sha256: str,
    documents: int,
    end: tuple[int, int],
    bad_before: dict[str, int],
) -> dict[str, Any]:
    """A shard's manifest entry, the one schema both writers use (``andrea tokenize``'s and the cache's):
    what it holds, its hash, its largest id, and where in the corpus it ends (``end``: the record that
    continues after it, and from which of that record's tokens)."""
    return {
        "file": name,
        "split": split,
        "index": index,
        "tokens": int(len(tokens)),
        "bytes": HEADER_BYTES + int(len(tokens)) * 2,
        "sha256": sha256,
        "max_token_id": int(tokens.max()) if len(tokens) else 0,
        "documents": documents,
        "end": {"record": end[0], "carry": end[1]},
        "bad_records_before_end": dict(bad_before),
    }


def tokenizer_entry(tokenizer: Tokenizer) -> dict[str, Any]:
    """The manifest's record of the tokenizer that made the ids (its sha256 is over ``to_str()``)."""
    return {
        "file": TOKENIZER_FILE,
        "sha256": sha256_text(tokenizer.to_str()),
        "vocab_size": tokenizer.get_vocab_size(),
        "eot_id": eot_id(tokenizer),
    }


def read_manifest(directory: Path) -> Optional[dict[str, Any]]:
    """The manifest of a shard directory, None if there is none; a damaged one is an error."""
    path = directory / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = load_json(path, "shard manifest")
    except HandedFileError as error:
        raise CorpusError(f"{error}; the shard directory is damaged") from None
    if not isinstance(manifest, dict) or manifest.get("format") != SHARD_FORMAT:
        raise CorpusError(f"{path} is not an `andrea tokenize` manifest (format {SHARD_FORMAT!r} expected)")
    return manifest


def is_shard_dir(directory: Path) -> bool:
    """A directory with our manifest, or whose visible files are all llm.c token files."""
    if (directory / MANIFEST_FILE).is_file():
        return True
    files = [path for path in directory.iterdir() if path.is_file() and not path.name.startswith(".")]
    return bool(files) and all(path.suffix == ".bin" and is_token_file(path) for path in files)


def shard_dir_corpus(directory: Path) -> TokenCorpus:
    """A shard directory: the manifest's shards, each checked to be at its size and to hash to its
    sha256 (:mod:`andrea_lab.data.shard_check`); the corpus hash is over the hashes read."""
    manifest = read_manifest(directory)
    if manifest is None:
        files = sorted(path for path in directory.glob("*.bin") if not path.name.startswith("."))
        return shard_glob_corpus(files, directory, str(directory))
    shards = check_manifest(manifest, directory / MANIFEST_FILE, SPLITS)
    if not manifest.get("complete"):
        raise CorpusError(
            f"shard directory {directory} is an unfinished `andrea tokenize` run ({len(shards)} shards so far); "
            "rerun the same `andrea tokenize` command to finish it"
        )
    facts = verify_shards(directory, shards)
    train = [directory / shard["file"] for shard in shards if shard["split"] == "train"]
    val = [directory / shard["file"] for shard in shards if shard["split"] == "val"]
    tokens = [
        sum(
            shard.get("tokens", 0)
            for shard in shards
            if shard["split"] == split and isinstance(shard.get("tokens", 0), int)
        )
        for split in SPLITS
    ]  # from the checked entries
    return TokenCorpus(
        train=train,
        val=val,
        root=directory,
        manifest=manifest,
        description=(
            f"shard directory {directory}: {len(train)} train + {len(val)} val shards, "
            f"{tokens[0]:,} + {tokens[1]:,} tokens"
        ),
        _fingerprint=shards_fingerprint([(shard["file"], found) for shard, found in zip(shards, facts)]),
    )


def shard_glob_corpus(files: list[Path], root: Path, spec: str) -> TokenCorpus:
    """``.bin`` shards named by a glob (or a directory without manifest): ``*train*`` and ``*val*``."""
    for path in files:
        scan_shard(path)  # a wrong header fails here, naming the file; read once, kept for check_ids
    train = sorted(path for path in files if "train" in path.name)
    val = sorted(path for path in files if "val" in path.name and "train" not in path.name)
    if not train:
        raise CorpusError(
            f"corpus {spec!r} has {len(files)} .bin files but none with 'train' in its name; shards are "
            "named *train*.bin and *val*.bin (as `andrea tokenize` and llm.c write them)"
        )
    return TokenCorpus(
        train=train, val=val, root=root, description=f"shards {spec}: {len(train)} train + {len(val)} val files"
    )


def token_file_corpus(path: Path) -> TokenCorpus:
    """One llm.c token file, its header checked now (with the file's name in any error)."""
    scan_shard(path)
    val_file = find_val_token_file(path)
    description = f"token file {path}" + (f" (validation: {val_file.name})" if val_file else "")
    return TokenCorpus(
        train=[path],
        val=[] if val_file is None else [val_file],
        description=description,
        root=path.parent,
        named_file=True,
    )


def find_val_token_file(train_file: Path) -> Optional[Path]:
    """The llm.c validation shard beside a training shard, or None.

    llm.c names shards ``<name>_train[_NNNNNN].bin`` and ``<name>_val[_NNNNNN].bin``;
    the first (sorted) ``<name>_val*.bin`` that is a token file is used.
    """
    name = train_file.name
    if "_train" not in name:
        return None
    prefix = name[: name.rindex("_train")]
    candidates = sorted(train_file.parent.glob(f"{glob.escape(prefix)}_val*.bin"))
    for candidate in candidates:
        if candidate != train_file and is_token_file(candidate):
            scan_shard(candidate)
            return candidate
    return None
