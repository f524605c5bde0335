"""Writing files so that a crash never leaves half of one, and hashing them: the helpers every module
that persists something uses (run records, sweep markers, checkpoints, token files, tokenizers)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional

from andrea_lab.errors import DiskFullError, UsageError

#: Bytes a JSON file a user can be handed may have (a run record is a few KB, a shard manifest of
#: ten thousand shards a few MB).
MAX_JSON_BYTES = 64 << 20
#: How deeply its arrays and objects may nest (a run record nests four deep).
MAX_JSON_DEPTH = 64

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
        f"partial file was left. Free space on {Path(path).parent} (or point the run elsewhere) and run again"
    )


def manifest_path(path: str | os.PathLike) -> Path:
    """The sha256 manifest written beside a checkpoint (``PATH.sha256.json``)."""
    return Path(f"{os.fspath(path)}.sha256.json")


def file_mode(path: str | os.PathLike) -> int:
    """The permission bits a rewrite of ``path`` keeps: those of the regular file there now (a user's document
    stays 0644, or 0600 if they made it so), else what ``open()`` would give a new file (0666 less the umask).
    ``mkstemp`` alone would leave every rewritten file 0600."""
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    if info is not None and stat.S_ISREG(info.st_mode):
        return stat.S_IMODE(info.st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_temp(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Call ``write(handle)`` on a new temporary sibling of ``path`` and fsync it; returns the temporary file,
    with the mode ``path`` keeps (:func:`file_mode`). On any failure the temporary file is removed; a full
    disk becomes :class:`DiskFullError`."""
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
            os.fchmod(handle.fileno(), file_mode(path))
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


def publish(tmp: Path, path: str | os.PathLike) -> None:
    """Rename a file :func:`write_temp` wrote over ``path`` (atomic on one filesystem); on failure the
    temporary file is removed and ``path`` is as it was."""
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(handle)`` on a temporary sibling of ``path``, fsync it, then ``os.replace`` it over
    ``path``: a reader (or a crash, or a full disk) sees the old file or the new one, never half of one.
    (Two files that must change together, a checkpoint and its manifest: :func:`write_temp` both, then
    :func:`publish` both, as ``checkpoint_io.AtomicCheckpointIO`` does.)"""
    publish(write_temp(path, write), path)


def write_json_atomic(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON, atomically. NaN and infinity are refused (JSON has none): records
    store a non-finite value as null."""
    text = json.dumps(payload, indent=2, allow_nan=False, default=str) + "\n"
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


class HandedFileError(UsageError):
    """A file a user named or was handed that cannot be read as what it should be: not a regular file,
    larger than such a file ever is, not UTF-8, or not well-formed (exit status 2)."""


def read_regular_bytes(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes. A FIFO, a device (a link to /dev/zero), a
    directory or a larger file is refused before anything is read: opened non-blocking, so a FIFO with no
    writer cannot make the open wait either."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise HandedFileError(f"{what} {os.fspath(path)} cannot be read: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # before fdopen, which refuses a directory with its own error
        os.close(fd)
        raise HandedFileError(
            f"{what} {os.fspath(path)} is not a regular file (a FIFO, a device or a directory); pass a file"
        )
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit:
            raise HandedFileError(
                f"{what} {os.fspath(path)} is {info.st_size:,} bytes; such a file has at most {limit:,}"
            )
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise HandedFileError(
            f"{what} {os.fspath(path)} is more than {limit:,} bytes; such a file has at most {limit:,}"
        )
    return data


def read_text_file(path: str | os.PathLike, what: str, limit: int) -> str:
    """A regular UTF-8 text file of at most ``limit`` bytes (:func:`read_regular_bytes`), decoded."""
    data = read_regular_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HandedFileError(
            f"{what} {os.fspath(path)} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})"
        ) from None


def json_depth(value: Any) -> int:
    """How deeply arrays and objects nest in a loaded JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def load_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value in a file a user can be handed, within bounds: a regular file of at most
    :data:`MAX_JSON_BYTES`, nesting at most :data:`MAX_JSON_DEPTH` deep; else one :class:`HandedFileError`."""
    text = read_text_file(path, what, MAX_JSON_BYTES)
    try:
        data = json.loads(text)
    except RecursionError:
        data = None
        deep = True
    except ValueError as exc:
        raise HandedFileError(f"{what} {os.fspath(path)} is not valid JSON: {exc}") from None
    else:
        deep = json_depth(data) > MAX_JSON_DEPTH
    if deep:
        raise HandedFileError(
            f"{what} {os.fspath(path)} nests more than {MAX_JSON_DEPTH} levels deep; such a file is never that deep"
        )
    return data


def read_json(path: str | os.PathLike) -> Optional[dict]:
    """A JSON object from a file, or None if it is missing, unreadable, not an object or past the bounds
    of :func:`load_json` (a run record linked to /dev/zero, a FIFO, a nesting bomb)."""
    try:
        data = load_json(path, "JSON file")
    except HandedFileError:
        return None
    return data if isinstance(data, dict) else None


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB pieces (token files are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def hash_named_file(digest: "hashlib._Hash", name: str, path: str | os.PathLike) -> None:
    """Feed a file's name, size and bytes into ``digest``, the name and size length-prefixed, so that no
    two different sequences of (name, file) hash the same (a corpus fingerprint)."""
    encoded = name.encode("utf-8")
    digest.update(len(encoded).to_bytes(8, "little"))
    digest.update(encoded)
    digest.update(os.stat(path).st_size.to_bytes(8, "little"))
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)


def sha256_text(text: str) -> str:
    """Hex sha256 of a string's UTF-8 bytes (a tokenizer's JSON, a config)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _blocked_by(path: Path) -> Optional[str]:
    """Why ``path`` (a directory, existing or to be created) cannot be written, or None."""
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def check_output_dir(path: str | os.PathLike, what: str) -> None:
    """Refuse, before any work, an output directory that cannot be one: an existing non-directory, or one
    under a file or under a directory this process cannot write. One :class:`UsageError` naming ``what``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} is a file, not a directory; pass a directory (it is created if missing)")
    blocked = _blocked_by(path)
    if blocked:
        raise UsageError(f"{what} {path} cannot be written: {blocked}; choose a directory you can write")


def check_output_file(path: str | os.PathLike, what: str) -> None:
    """Refuse an output file that is a directory, or whose directory cannot be created or written."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} {path} is a directory; pass a file name")
    blocked = _blocked_by(path.parent)
    if blocked:
        raise UsageError(f"{what} {path} cannot be written: {blocked}; choose a directory you can write")


def check_one_name(what: str, value: Any, example: str) -> None:
    """Refuse a name that must stay one directory entry (a run's name, a checkpoint file name, a suite's name
    read from a record) but holds a path separator, a NUL, or is ``.``/``..``: joined to its directory it
    would write elsewhere. One :class:`UsageError` naming ``what``, the value, and a valid example."""
    if value is None or isinstance(value, int) or value == "":
        return
    text = str(value)
    if text in (".", "..") or "/" in text or "\\" in text or os.sep in text or "\0" in text or os.path.isabs(text):
        raise UsageError(
            f"{what} {text!r} would leave its directory; it is one name: letters, digits, '_', '-', '.', "
            f"without '/', '\\' or '..' (e.g. {example})"
        )


def refuse_links_below(root: str | os.PathLike, path: str | os.PathLike, what: str) -> None:
    """Refuse ``path`` if it, or any directory between ``root`` and it, is a symbolic link (checked without
    following one): a directory andrea creates or writes into is never one a link redirects elsewhere."""
    root, path = Path(os.path.abspath(root)), Path(os.path.abspath(path))
    if root != path and root not in path.parents:
        raise UsageError(f"{what} {path} is not inside {root}; andrea writes it only there")
    for step in [path, *[p for p in path.parents if p == root or root in p.parents]]:
        if step.is_symlink():
            raise UsageError(
                f"{what}: {step} is a symbolic link (to {os.readlink(step)}); andrea never writes through a "
                "link, since it could point anywhere. Remove the link (or replace it with a real directory)"
            )


def open_new_or_own(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that never follows a symbolic link at ``path`` (``O_NOFOLLOW``): a lock or marker file that
    is a link to a user's file is refused instead of being opened (and rewritten) through it."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or Path(path).is_symlink():
            raise UsageError(
                f"{os.fspath(path)} is a symbolic link (to {os.readlink(path)}); andrea never writes through a "
                "link. Remove it and run again"
            ) from None
        raise
