"""The directory ``andrea compare`` writes its report into: one it made itself, never a user's.

``--out`` may name a directory that holds a user's files (``runs.csv``, notes). compare rewrites a
directory only if it made it: it leaves :data:`MARKER` in every directory it creates, and refuses an
existing, non-empty directory without one. It writes nothing through a symbolic link: not the directory,
not one of the report files in it (a ``comparison.md`` linked to a user's notes would be overwritten).
Names that become directories below it (a suite's, a scale's) come from run records, so each must be one name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from andrea_lab.errors import UsageError
from andrea_lab.files import check_one_name

#: The file that says "andrea compare made this directory" (and may rewrite it).
MARKER = ".andrea-compare"


def check_names(what: str, names: Iterable[str]) -> None:
    """Each recorded suite or scale name is one directory name (a record could say ``/home/you``)."""
    for name in names:
        check_one_name(f"the {what} name recorded in the runs,", name, "tiny")


def claim_out_dir(out: Path) -> None:
    """Make ``out`` compare's own (created with :data:`MARKER`), or check that it already is; refuse a
    link anywhere in it and a non-empty directory compare did not make (one :class:`UsageError`)."""
    if out.is_symlink():
        raise UsageError(
            f"--out {out} is a symbolic link (to {os.readlink(out)}); compare never writes through a link: "
            "pass a real directory"
        )
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UsageError(
            f"--out {out} already holds files that `andrea compare` did not write; it never overwrites them. "
            "Pass a new or empty directory (e.g. --out compare-report)"
        )
    for root, dirs, files in os.walk(out, followlinks=False):
        for name in (*dirs, *files):
            if (Path(root) / name).is_symlink():
                link = Path(root) / name
                raise UsageError(
                    f"{link} is a symbolic link (to {os.readlink(link)}); compare never writes through a link. "
                    f"Remove it (or pass another --out)"
                )
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by andrea compare; it rewrites this directory's reports\n")
