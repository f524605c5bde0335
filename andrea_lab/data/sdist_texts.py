"""Read the plain-text members of a verified sdist, and nothing else of it.

The tarball is read, never extracted: a member's name is only matched against the one folder asked for
(``<top>/<folder>/<name>.txt``, no deeper), so no name decides where anything is written (no path
traversal), links and devices are skipped (only regular files are read), and every member and the whole
are bounded in size (a hostile or damaged archive cannot fill the disk or memory). The caller writes
what it keeps under names of its own.
"""

from __future__ import annotations

import tarfile
import zlib
from pathlib import Path, PurePosixPath

from andrea_lab.data.errors import CorpusError

#: The most one text member may hold (the largest play is ~176 KB).
MAX_MEMBER_BYTES = 4 << 20
#: The most all the text members read together may hold.
MAX_TOTAL_BYTES = 64 << 20


def text_members(
    archive: Path,
    folder: str,
    exclude: frozenset[str] = frozenset(),
    max_member: int = MAX_MEMBER_BYTES,
    max_total: int = MAX_TOTAL_BYTES,
) -> dict[str, str]:
    """``{file name: text}`` of the regular ``*.txt`` files directly in ``<top>/<folder>/`` of ``archive``
    (a ``.tar.gz`` whose top directory is any one name), less those named in ``exclude``; one
    ``CorpusError`` naming the archive and the member for anything that is not UTF-8 text within bounds."""
    wanted = PurePosixPath(folder).parts
    texts: dict[str, str] = {}
    total = 0
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                parts = PurePosixPath(member.name).parts
                if not member.isfile() or len(parts) != len(wanted) + 2 or parts[1:-1] != wanted:
                    continue
                name = parts[-1]
                if not name.endswith(".txt") or name in exclude or name.startswith("."):
                    continue
                if member.size > max_member or total + member.size > max_total:
                    raise CorpusError(
                        f"{archive}: member {member.name} ({member.size:,} bytes) goes past the bound of "
                        f"{max_member:,} bytes a member and {max_total:,} in all; not a corpus this reads"
                    )
                handle = tar.extractfile(member)
                data = handle.read(max_member + 1) if handle is not None else b""
                total += len(data)
                texts[name] = _decoded(archive, member.name, data)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as problem:
        raise CorpusError(f"{archive} is not a readable .tar.gz ({problem}); fetch it again") from None
    if not texts:
        raise CorpusError(f"{archive} has no *.txt member under {folder}/; expected the corpus's texts there")
    return texts


def _decoded(archive: Path, name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        reason = f"{error.reason} at byte {error.start}"
        raise CorpusError(f"{archive}: member {name} is not UTF-8 text ({reason})") from None
