"""Shards checked against their manifest and against the vocabulary, on the data itself.

A shard directory is a file people hand each other, and its manifest is only a claim: a shard
rewritten after ``andrea tokenize`` (same size, other ids) would otherwise train silently, or index
past the embedding (an ``IndexError`` on the CPU, a device-side assert on a GPU). So every shard is
read once per process: its sha256 is compared with the manifest's and its largest id is taken from
the ids themselves, in the same pass. The result is kept for the process (keyed by the file's
identity and modification time), so the data module, the run record and a second fit in one process
never read a shard twice. The run records the hashes computed here, not the manifest's.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from andrea_lab.data.errors import CorpusError
from andrea_lab.data.token_file import HEADER_BYTES, header_token_count

#: What the manifest's entries must be (``andrea tokenize`` writes exactly these types).
_SHARD_FIELDS = {"file": str, "split": str, "bytes": int, "sha256": str, "max_token_id": int}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 22  # bytes per read: even, so a chunk never splits a uint16 id


@dataclass(frozen=True)
class ShardFacts:
    """What reading a shard found: its sha256 and its largest token id (0 when empty)."""

    sha256: str
    max_id: int


_SCANNED: dict[tuple, ShardFacts] = {}


def check_manifest(manifest: dict[str, Any], path: Path, splits: tuple[str, ...]) -> list[dict[str, Any]]:
    """The manifest's ``shards``, each checked to have the fields and types ``andrea tokenize`` writes
    and to name a file inside the directory; one :class:`CorpusError` naming the first entry that does not."""
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        raise CorpusError(
            f"{path} has no list of shards ('shards' is {type(shards).__name__}); the shard "
            "directory is damaged: rerun `andrea tokenize` into a new directory"
        )
    for number, shard in enumerate(shards):
        problem = _entry_problem(shard, splits)
        if problem:
            raise CorpusError(
                f"{path}: shard entry {number} {problem}; the shard directory is damaged: rerun "
                "`andrea tokenize` into a new directory"
            )
    for key, kind in (("complete", bool), ("totals", dict), ("tokenizer", (dict, type(None)))):
        if key in manifest and not isinstance(manifest[key], kind):
            raise CorpusError(
                f"{path}: {key!r} is {type(manifest[key]).__name__}, not what `andrea tokenize` "
                "writes; the shard directory is damaged"
            )
    return shards


def _entry_problem(shard: Any, splits: tuple[str, ...]) -> str:
    if not isinstance(shard, dict):
        return f"is {type(shard).__name__}, not an object"
    for field, kind in _SHARD_FIELDS.items():
        value = shard.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"has {field} {value!r} ({'a string' if kind is str else 'an integer'} expected)"
    if Path(shard["file"]).name != shard["file"] or shard["file"] in ("", ".", ".."):
        return f"names {shard['file']!r}, not a file inside the directory"
    if shard["split"] not in splits:
        return f"has split {shard['split']!r} (valid: {', '.join(splits)})"
    if not _SHA256.fullmatch(shard["sha256"]) or shard["bytes"] < HEADER_BYTES:
        return f"has sha256 {shard['sha256']!r} and bytes {shard['bytes']} (64 hex digits and a whole header expected)"
    return ""


def scan_shard(path: Path) -> ShardFacts:
    """sha256 and largest id of a token file, read once per process, its header read once and checked
    before anything else."""
    info = os.stat(path)
    key = (os.path.realpath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    if key not in _SCANNED:
        digest, highest = hashlib.sha256(), 0
        with open(path, "rb") as handle:
            header = handle.read(HEADER_BYTES)
            remaining = 2 * header_token_count(header, info.st_size, path)  # a wrong header fails here, naming it
            digest.update(header)
            while remaining > 0 and (chunk := handle.read(min(_CHUNK, remaining))):
                digest.update(chunk)
                remaining -= len(chunk)
                highest = max(highest, int(np.frombuffer(chunk[: len(chunk) // 2 * 2], dtype="<u2").max()))
        _SCANNED[key] = ShardFacts(digest.hexdigest(), highest)
    return _SCANNED[key]


def verify_shards(directory: Path, shards: list[dict[str, Any]]) -> list[ShardFacts]:
    """Each shard of the manifest read and compared with its entry (size, sha256); one error naming the
    first that differs."""
    facts = []
    for shard in shards:
        path = directory / shard["file"]
        if not path.is_file() or path.stat().st_size != shard["bytes"]:
            raise CorpusError(f"shard {path} is missing or not {shard['bytes']} bytes as its manifest says")
        found = scan_shard(path)
        if found.sha256 != shard["sha256"]:
            raise CorpusError(
                f"shard {path} has sha256 {found.sha256[:16]}…, but its manifest says "
                f"{shard['sha256'][:16]}…: it was changed after `andrea tokenize` wrote it; rerun "
                "`andrea tokenize` into a new directory (or restore the shard)"
            )
        facts.append(found)
    return facts


def shards_fingerprint(named: list[tuple[str, ShardFacts]]) -> str:
    """The corpus hash a run records for shards: over each shard's name and the sha256 read from it."""
    digest = hashlib.sha256(b"shards\0")
    for name, facts in named:
        digest.update(f"{name}\0{facts.sha256}\0".encode("utf-8"))
    return digest.hexdigest()


def check_ids(paths: list[Path], vocab_size: int) -> None:
    """Every id of every token file below ``vocab_size``, read from the files; one error naming the file
    with the largest id and that id (so the vocab_size it asks for is enough for all of them)."""
    if not paths:
        return
    highest, path = max((scan_shard(path).max_id, path) for path in paths)
    if highest >= vocab_size:
        raise CorpusError(
            f"token file {path} contains token id {highest} but vocab_size is {vocab_size}; every id must be "
            f"below vocab_size (set model.config.vocab_size to at least {highest + 1})"
        )
