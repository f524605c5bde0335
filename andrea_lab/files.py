"""Writing files so that a crash never leaves half of one, and hashing them: the helpers every module
that persists something uses (run records, sweep markers, checkpoints, token files, tokenizers)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional

from andrea_lab.errors import DiskFullError

#: "No space left on device" and "disk quota exceeded": the disk is full as far as the writer can tell.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_full_cause(exc: BaseException) -> Optional[OSError]:
    """The ENOSPC/EDQUOT ``OSError`` behind ``exc``, if there is one. A writer such as ``torch.save`` may
    raise its own error (``unexpected pos``) while handling the ``OSError``, so the chain is searched."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def disk_full_error(path: str | os.PathLike, cause: OSError) -> DiskFullError:
    """The one message for a full disk: which file, that nothing was replaced, what to do."""
    previous = "the previous version of it is intact" if Path(path).exists() else "nothing was written"
    return DiskFullError(
        f"the disk is full ({os.strerror(cause.errno)}) while writing {os.fspath(path)}: {previous}, and no "
        f"partial file was left. Free space on {Path(path).parent} (or point the run elsewhere) and run again")


def manifest_path(path: str | os.PathLike) -> Path:
    """The sha256 manifest written beside a checkpoint (``PATH.sha256.json``)."""
    return Path(f"{os.fspath(path)}.sha256.json")


def write_temp(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Call ``write(handle)`` on a new temporary sibling of ``path`` and fsync it; returns the temporary file.
    On any failure the temporary file is removed; a full disk becomes :class:`DiskFullError`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        if exc.errno in DISK_FULL_ERRNOS:
            raise disk_full_error(path, exc) from None
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        cause = disk_full_cause(exc)
        if cause is not None:
            raise disk_full_error(path, cause) from None
        raise
    return Path(tmp)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(handle)`` on a temporary sibling of ``path``, fsync it, then ``os.replace`` it over
    ``path``: a reader (or a crash, or a full disk) sees the old file or the new one, never half of one."""
    tmp = write_temp(path, write)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
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
