"""Near-duplicate families (andrea_lab.data.families) and the split that keeps each on one side."""

from __future__ import annotations

import random

import pytest

from andrea_lab.data.corpus import resolve_corpus
from andrea_lab.data.families import MIN_SHARED, OVERLAP_BOUND, family_names, line_windows, window_overlap
from andrea_lab.data.split import split_documents


def _lines(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(10**6)}" for _ in range(12)) for _ in range(count)]


def _text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def test_line_windows_are_the_64_byte_windows_at_line_starts() -> None:
    text = b"a" * 70 + b"\n" + b"b" * 64 + b"\nshort\n"
    assert line_windows(text) == {b"a" * 64, b"b" * 64}


def test_a_near_copy_is_kin_and_an_unrelated_document_is_not() -> None:
    original = _lines(0, 200)
    copy = list(original)
    copy[10:20] = _lines(1, 10)  # 95 % of the lines kept
    names = ["pkg/zz_copy.py", "pkg/aa_original.py", "other.py"]
    families = family_names(names, [_text(copy), _text(original), _text(_lines(2, 200))])
    assert families == ["pkg/aa_original.py", "pkg/aa_original.py", "other.py"]


def test_a_shared_licence_header_alone_does_not_make_kin() -> None:
    header = _lines(3, MIN_SHARED - 1)
    texts = [_text(header + _lines(4, 300)), _text(header + _lines(5, 300))]
    assert family_names(["a.py", "b.py"], texts) == ["a.py", "b.py"]
    tiny = [_text(header), _text(header)]  # all of both documents shared, but fewer windows than MIN_SHARED
    assert family_names(["a.py", "b.py"], tiny) == ["a.py", "b.py"]


def test_families_do_not_depend_on_the_order_of_the_corpus() -> None:
    base = _lines(6, 100)
    texts = {"c.py": _text(base), "a.py": _text(base[:90] + _lines(7, 10)), "b.py": _text(_lines(8, 100))}
    forward = dict(zip(texts, family_names(list(texts), list(texts.values()))))
    names = list(reversed(texts))
    backward = dict(zip(names, family_names(names, [texts[n] for n in names])))
    assert forward == backward == {"c.py": "a.py", "a.py": "a.py", "b.py": "b.py"}


def test_the_split_keeps_a_family_on_one_side() -> None:
    names = [f"doc{i:03d}.py" for i in range(200)]
    families = [f"family{i // 10}" for i in range(200)]  # 20 families of 10
    train, val = split_documents(names, 0.3, families)
    assert train and val
    for side in (train, val):
        other = set(range(200)) - set(side)
        assert not {families[i] for i in side} & {families[i] for i in other}
    assert split_documents(names, 0.3, families) == (train, val)
    with pytest.raises(ValueError, match="200 documents but 3 family names"):
        split_documents(names, 0.3, families[:3])


def test_one_family_of_all_documents_is_split_by_document() -> None:
    train, val = split_documents(["a", "b", "c"], 0.5, ["f", "f", "f"])
    assert train and val


def test_window_overlap_counts_held_out_windows_found_in_training() -> None:
    shared, own = _lines(9, 50), _lines(10, 50)
    assert window_overlap([_text(own)], [_text(shared)]) == 0.0
    assert window_overlap([_text(shared)], [_text(shared + own)]) == pytest.approx(1.0, abs=0.03)
    assert window_overlap([], [_text(shared)]) == 0.0


def test_on_stdlib_the_family_split_leaves_little_held_out_text_in_training() -> None:
    """The default corpus: by family, under OVERLAP_BOUND of the held-out windows are in training; by file
    name (split version 1), the near-copies straddling the split put well over the bound there."""
    corpus = resolve_corpus("stdlib")
    names, texts = corpus.relative_names(), [path.read_bytes() for path in corpus.files]

    def overlap(families) -> float:
        train, val = split_documents(names, 0.05, families)
        return window_overlap([texts[i] for i in val], [texts[i] for i in train])

    assert overlap(family_names(names, texts)) < OVERLAP_BOUND < overlap(None)


def test_two_editions_of_a_play_are_kin_only_by_the_spelling_folded_words(play_writer, folio_writer) -> None:
    from andrea_lab.data.acts import split_acts

    modern = play_writer(11)
    folio = folio_writer(modern)
    acts = [text.encode() for _, text in split_acts(modern) + split_acts(folio)]
    other = [text.encode() for _, text in split_acts(play_writer(12))]
    names = [f"m{i}" for i in range(3)] + [f"f{i}" for i in range(3)] + [f"o{i}" for i in range(3)]
    assert family_names(names, acts + other, editions=True) == ["f0", "f1", "f2"] * 2 + ["o0", "o1", "o2"]
    assert family_names(names, acts + other) == names, "the folio spelling shares no 64-byte line windows"
