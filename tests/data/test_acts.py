"""Cutting a play into acts (andrea_lab.data.acts)."""

from __future__ import annotations

from andrea_lab.data.acts import PIECE_CHARS, pieces, split_acts


def test_each_act_heading_starts_a_document_and_the_front_matter_joins_the_first():
    text = "TITLE\n\nPERSONS.\n\nACT I.\nScene I.\nfirst\n\nACT II.\nsecond\nACT III\nthird\n"
    acts = split_acts(text)
    assert [number for number, _ in acts] == [1, 2, 3]
    assert acts[0][1].startswith("TITLE") and acts[1][1] == "ACT II.\nsecond\n"
    assert "".join(part for _, part in acts) == text


def test_folio_latin_english_and_arabic_headings_are_acts_and_a_repeated_heading_is_not_a_new_one():
    folio = "Actus Primus. Scoena Prima.\na\nActus Secundus.\nb\nActus Tertius, Scaena prima.\nc\n"
    assert [number for number, _ in split_acts(folio)] == [1, 2, 3]
    english = "ACT FIRST.\na\nACT SECOND\nb\n"
    assert [number for number, _ in split_acts(english)] == [1, 2]
    repeated = "ACT I. SCENE 1.\na\nACT I. SCENE 2.\nb\nACT 2\nc\n"  # Gutenberg repeats the act before each scene
    assert [(number, part.count("\n")) for number, part in split_acts(repeated)] == [(1, 4), (2, 2)]


def test_a_line_that_merely_begins_with_act_is_not_a_heading():
    text = "ACT I.\na\nAct upon it, my lord, and with all speed I pray you.\nAct well\nACT II.\nb\n"
    assert [number for number, _ in split_acts(text)] == [1, 2]


def test_an_undivided_text_is_cut_into_pieces_of_about_an_act_at_blank_lines():
    stanza = "a line of verse here\n" * 14 + "\n"
    poem = stanza * (3 * PIECE_CHARS // len(stanza))
    parts = split_acts(poem)
    assert [number for number, _ in parts] == [0, 0, 0]
    assert "".join(part for _, part in parts) == poem
    assert all(part.endswith("\n\n") for _, part in parts[:-1]), "cut at blank lines"
    assert all(abs(len(part) - PIECE_CHARS) < len(stanza) * 2 for _, part in parts)
    assert pieces("short\n") == ["short\n"]


def test_an_act_over_twice_the_piece_length_is_cut_too():
    long_act = ("verse\n" * 10 + "\n") * (5 * PIECE_CHARS // 66)
    text = "ACT I.\nshort\n" + "ACT II.\n" + long_act
    acts = split_acts(text)
    assert [number for number, _ in acts][:2] == [1, 2] and len(acts) >= 4
    assert {number for number, _ in acts[1:]} == {2} and "".join(part for _, part in acts) == text
