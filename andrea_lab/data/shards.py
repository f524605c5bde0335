"""Shard directories: what ``andrea tokenize`` writes and the data module reads.

A shard directory holds

* ``tokenizer.json``: the tokenizer that made the ids;
* ``train_NNNNNN.bin`` / ``val_NNNNNN.bin``: llm.c token files of exactly ``shard_tokens`` tokens each
  (the last of a split may be shorter), each document followed by ``<|endoftext|>``; a document that
  does not fit the rest of a shard continues in the next one, as in llm.c's shards;
* ``manifest.json``: the settings, the tokenizer's sha256, the corpus fingerprint, and per shard its
  size, token and document counts, sha256, largest id, and where in the corpus it ends (for resume);
  ``complete`` is true once every record has been read.

The data module also reads shard directories that have no manifest (llm.c's FineWeb output) and globs
of ``.bin`` files: files whose names contain ``train`` are training shards, ``val`` validation ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from andrea_lab.data.corpus import Corpus, CorpusError
from andrea_lab.data.shard_check import check_manifest, shards_fingerprint, verify_shards
from andrea_lab.data.token_file import is_token_file, read_token_file
from andrea_lab.files import HandedFileError, load_json

MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
SHARD_FORMAT = "andrea-shards"
SHARD_FORMAT_VERSION = 1
SPLITS = ("train", "val")


def shard_name(split: str, index: int) -> str:
    """``train_000000.bin``: llm.c's naming, so its tools (and ours) tell the splits apart by name."""
    return f"{split}_{index:06d}.bin"


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


def shard_dir_corpus(directory: Path) -> Corpus:
    """A shard directory as a tokenized corpus: the manifest's shards, each checked to be at its size and
    to hash to its sha256 (:mod:`andrea_lab.data.shard_check`); the corpus hash is over the hashes read."""
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
    totals = manifest.get("totals", {})
    corpus = Corpus(
        files=[], token_file=None, root=directory, train_shards=train, val_shards=val, shard_manifest=manifest,
        description=(f"shard directory {directory}: {len(train)} train + {len(val)} val shards, "
                     f"{totals.get('train_tokens', 0):,} + {totals.get('val_tokens', 0):,} tokens"),
    )
    corpus._fingerprint = shards_fingerprint([(shard["file"], found) for shard, found in zip(shards, facts)])
    return corpus


def shard_glob_corpus(files: list[Path], root: Path, spec: str) -> Corpus:
    """``.bin`` shards named by a glob (or a directory without manifest): ``*train*`` and ``*val*``."""
    for path in files:
        read_token_file(path)  # a wrong header fails here, naming the file
    train = sorted(path for path in files if "train" in path.name)
    val = sorted(path for path in files if "val" in path.name and "train" not in path.name)
    if not train:
        raise CorpusError(
            f"corpus {spec!r} has {len(files)} .bin files but none with 'train' in its name; shards are "
            "named *train*.bin and *val*.bin (as `andrea tokenize` and llm.c write them)"
        )
    return Corpus(files=[], token_file=None, root=root, train_shards=train, val_shards=val,
                  description=f"shards {spec}: {len(train)} train + {len(val)} val files")
