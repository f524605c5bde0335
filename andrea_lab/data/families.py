"""Near-duplicate families: documents that share much of their text verbatim go to one side of the split.

Splitting by document keeps a held-out file unseen as a whole, but not its near-copies: the standard
library's charmap codecs (``encodings/cp858.py`` and ``cp850.py`` share most of their lines), the two
MSVC compiler modules of ``distutils``, ``chunk.py`` and ``wave.py``. With such a pair straddling the
split, the held-out loss rewards memorising the training copy. So documents are grouped into families by
*measured* overlap, and the split hashes the family, not the file.

The measure: every 64-byte window that starts at a line start (a sample of a document's windows that two
copies of one text share at the same places, unlike windows at fixed offsets). Two documents are kin when
at least :data:`MIN_SHARED` windows are shared and they make up at least :data:`CONTAINMENT` of the smaller
document's windows; families are the connected groups of kin. On the ``stdlib`` corpus (Python 3.11) that
makes 570 families of 671 files (the largest: 43 charmap codecs) in about a second, and the held-out
side's windows found verbatim in the training side fall from 9.9 % (split by file) to 2.6 % (by family; the
rest is licence headers and common idioms). :func:`window_overlap` measures that share; a test holds it
below :data:`OVERLAP_BOUND` on the default corpus.

Two *editions* of one text share few verbatim windows: the First Folio's "Stand & vnfold your selfe" is
the modern "stand, and unfold yourself". A corpus that holds editions (``shakespeare``) asks for a second
measure as well (``editions=True``): every word 3-gram after the old spellings are folded (lower case,
``v``/``j``/``y`` as ``u``/``i``/``i``, doubled letters single, a final ``e`` dropped), one in
:data:`SHINGLE_SAMPLE` of them kept by a fixed hash, and only those held by at most :data:`MAX_HOLDERS`
documents (a 3-gram in more is an idiom, not shared text). Two documents are kin by it when the shared
ones are at least :data:`WORD_CONTAINMENT` of the smaller document's. On the ``shakespeare`` corpus 171
pairs share 0.5-0.776 of them (an act and its other edition), a Folio piece that spans two modern acts
0.109-0.475 of each, *The Passionate Pilgrim* and *Love's Labour's Lost* act IV (which share sonnets) 0.113
and 0.125, and no two documents of different works reach 0.1 otherwise (a slow test checks the families).
It stays off for other corpora, whose families (and so splits) it would change.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter, defaultdict
from typing import Collection, Iterable, Optional, Sequence

#: Bytes per window: long enough that a shared window is shared text, not a shared idiom.
WINDOW_BYTES = 64
#: The share of the smaller document's windows that the other must hold for the two to be kin.
CONTAINMENT = 0.5
#: Fewer shared windows than this never make kin (two tiny files that are both one licence header).
MIN_SHARED = 8
#: The most of the held-out side's windows that may be found verbatim in training (default corpus, a test).
OVERLAP_BOUND = 0.05

#: Editions: the share of the smaller document's distinctive word 3-grams the other must hold.
WORD_CONTAINMENT = 0.1
#: Editions: one word 3-gram in this many is kept (by its crc32), for speed; enough remain (hundreds an act).
SHINGLE_SAMPLE = 4
#: Editions: a 3-gram held by more documents than this is an idiom ("i pray you"), not shared text.
MAX_HOLDERS = 8

_LINE_START = re.compile(rb"\n")
_WORD = re.compile(rb"[a-z]+")
_FOLD = bytes.maketrans(b"vjy", b"uii")
_DOUBLED = re.compile(rb"(.)\1")


def line_windows(text: bytes) -> set[bytes]:
    """The distinct :data:`WINDOW_BYTES`-byte windows of ``text`` that start at a line start."""
    starts = [0, *(match.end() for match in _LINE_START.finditer(text))]
    return {text[start : start + WINDOW_BYTES] for start in starts if start + WINDOW_BYTES <= len(text)}


def family_names(names: Sequence[str], texts: Iterable[bytes], editions: bool = False) -> list[str]:
    """Each document's family, named by its alphabetically first member (a document without kin is its own).

    ``names`` and ``texts`` are in corpus order; ``editions`` adds the spelling-folded word measure (see the
    module docstring). The result depends only on the texts and names, not on their order, so the split
    stays the same however a corpus is listed."""
    texts = list(texts)
    if len(texts) != len(names):
        raise ValueError(f"{len(names)} document names but {len(texts)} texts")
    parent = list(range(len(names)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    measures = [([line_windows(text) for text in texts], CONTAINMENT, None)]
    if editions:
        measures.append(([word_shingles(text) for text in texts], WORD_CONTAINMENT, MAX_HOLDERS))
    for sets, containment, max_holders in measures:
        for a, b in kin_pairs(sets, containment, max_holders):
            parent[root(a)] = root(b)
    members: dict[int, list[str]] = defaultdict(list)
    for index, name in enumerate(names):
        members[root(index)].append(name)
    first = {group: min(group_names) for group, group_names in members.items()}
    return [first[root(index)] for index in range(len(names))]


def kin_pairs(
    sets: Sequence[Collection], containment: float, max_holders: Optional[int] = None
) -> list[tuple[int, int]]:
    """The pairs ``(a, b)`` whose shared items are at least :data:`MIN_SHARED` and ``containment`` of the
    smaller one's; with ``max_holders``, items held by more documents than that are left out of both."""
    if max_holders is not None:
        counts = Counter(item for items in sets for item in items)
        sets = [{item for item in items if counts[item] <= max_holders} for items in sets]
    pairs = []
    for (a, b), shared in _shared_windows(sets).items():
        if shared >= MIN_SHARED and shared >= containment * min(len(sets[a]), len(sets[b])):
            pairs.append((a, b))
    return pairs


def word_shingles(text: bytes) -> set[int]:
    """The spelling-folded word 3-grams of ``text`` kept by the sample, as crc32 values (module docstring)."""
    words = [_folded(word) for word in _WORD.findall(text.lower())]
    shingles = (zlib.crc32(b" ".join(words[i : i + 3])) for i in range(len(words) - 2))
    return {shingle for shingle in shingles if shingle % SHINGLE_SAMPLE == 0}


def _folded(word: bytes) -> bytes:
    word = _DOUBLED.sub(rb"\1", word.translate(_FOLD))
    return word[:-1] if len(word) > 3 and word.endswith(b"e") else word


def _shared_windows(windows: Sequence[Collection]) -> Counter:
    """``{(a, b): windows documents a < b have in common}``, over the pairs that share any."""
    holders: dict[bytes, list[int]] = defaultdict(list)
    for index, document in enumerate(windows):
        for window in document:
            holders[window].append(index)
    shared: Counter = Counter()
    for documents in holders.values():
        for i, a in enumerate(documents):
            for b in documents[i + 1 :]:
                shared[(a, b)] += 1
    return shared


def window_overlap(held_out: Iterable[bytes], training: Iterable[bytes]) -> float:
    """The share of the held-out documents' line-start windows (each document's distinct ones) that occur
    verbatim in some training document: 0 for a clean split, near 1 when held-out text was trained on."""
    seen: set[bytes] = set()
    for text in training:
        seen |= line_windows(text)
    found = total = 0
    for text in held_out:
        windows = line_windows(text)
        total += len(windows)
        found += sum(window in seen for window in windows)
    return found / total if total else 0.0
