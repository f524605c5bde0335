"""Writing files so that a crash never leaves half of one, and hashing them: the helpers every module
that persists something uses (run records, sweep markers, checkpoints, token files, tokenizers)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(handle)`` on a temporary sibling of ``path``, fsync it, then ``os.replace`` it over
    ``path``: a reader (or a crash) sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON, atomically. NaN and infinity are refused (JSON has none): records
    store a non-finite value as null."""
    text = json.dumps(payload, indent=2, allow_nan=False, default=str) + "\n"
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def read_json(path: str | os.PathLike) -> Optional[dict]:
    """A JSON object from a file, or None if it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB pieces (token files are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    """Hex sha256 of a string's UTF-8 bytes (a tokenizer's JSON, a config)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
