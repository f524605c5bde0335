"""Held-out strata (andrea_lab.data.strata): English prose against code, measured on the text alone."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from andrea_lab.data.strata import CODE, PROSE, stratum_of

STDLIB = Path(sysconfig.get_paths()["stdlib"])

HELP_TEXT = 'topics = {"assert": "The assert statement\\n' + "Assert statements are a convenient way " * 40 + '"}\n'
CODE_TEXT = "def f(x):\n    return [y * 2 for y in range(x) if y % 3]\n" * 40


def test_help_text_in_strings_is_prose_and_code_is_code() -> None:
    assert stratum_of("pydoc_data/topics.py", HELP_TEXT) == PROSE
    assert stratum_of("mod.py", CODE_TEXT) == CODE
    assert stratum_of("mod.py", '"""' + "A module that explains itself at length. " * 50 + '"""\nx = 1\n') == PROSE


def test_a_table_of_escapes_is_code_not_prose() -> None:
    table = "decoding_table = (\n" + "    '\\x00'     #  0x00 -> NULL\n" * 200 + ")\n"
    assert stratum_of("encodings/cp_x.py", table) == CODE


def test_other_documents_by_their_letters_and_python_that_does_not_tokenize() -> None:
    assert stratum_of("notes.txt", "Plain English words, sentence after sentence. " * 20) == PROSE
    assert stratum_of("data.csv", "1,2,3,4\n5,6,7,8\n" * 20) == CODE
    assert stratum_of("broken.py", "Some words and an unclosed ( bracket " * 10 + '"""') == PROSE
    assert stratum_of("empty.py", "") == CODE


def test_the_standard_librarys_help_text_is_prose() -> None:
    text = (STDLIB / "pydoc_data" / "topics.py").read_text(encoding="utf-8")
    assert stratum_of("pydoc_data/topics.py", text) == PROSE
    assert stratum_of("heapq.py", (STDLIB / "heapq.py").read_text(encoding="utf-8")) == CODE
