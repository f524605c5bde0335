"""The generated blocks of a Markdown document: text between ``<!-- andrea compare: BEGIN <suite> <what> -->``
and its END marker, which ``andrea compare --doc`` rewrites (and nothing else of the document)."""

from __future__ import annotations

import re
from typing import Optional

from andrea_lab.errors import UsageError


def _markers(suite: str, what: str) -> tuple[str, str]:
    return f"<!-- andrea compare: BEGIN {suite} {what} -->", f"<!-- andrea compare: END {suite} {what} -->"


def generated_blocks(text: str) -> list[tuple[str, str, str]]:
    """``(suite, what, content)`` of every generated block in a Markdown text."""
    pattern = re.compile(r"<!-- andrea compare: BEGIN (\S+) (\S+) -->\n(.*?)\n<!-- andrea compare: END \1 \2 -->", re.S)
    return [(m.group(1), m.group(2), m.group(3)) for m in pattern.finditer(text)]


class GeneratedBlockError(UsageError):
    """A document's markers of a generated block that do not pair up (exit status 2): rewriting it would
    delete or duplicate the user's text, so nothing is written."""


def _marker_span(text: str, suite: str, what: str) -> Optional[tuple[int, int]]:
    """Where the block of (suite, what) starts and ends in ``text`` (None when it has no markers); one
    :class:`GeneratedBlockError` naming the lines when its markers are not exactly one BEGIN, then one END."""
    begin, end = _markers(suite, what)
    begins, ends = (
        [m.start() for m in re.finditer(re.escape(begin), text)],
        [m.start() for m in re.finditer(re.escape(end), text)],
    )
    if not begins and not ends:
        return None

    def line(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    if len(begins) > 1 or len(ends) > 1:
        twice, marker = (begins, begin) if len(begins) > 1 else (ends, end)
        problem = f"`{marker}` appears {len(twice)} times (lines {', '.join(str(line(o)) for o in twice)})"
    elif not ends:
        problem = f"`{begin}` (line {line(begins[0])}) has no `{end}` after it"
    elif not begins:
        problem = f"`{end}` (line {line(ends[0])}) has no `{begin}` before it"
    elif ends[0] < begins[0]:
        problem = f"`{end}` (line {line(ends[0])}) comes before `{begin}` (line {line(begins[0])})"
    else:
        return begins[0], ends[0] + len(end)
    raise GeneratedBlockError(
        f"{problem}; fix the markers so that the block has one BEGIN line and one END line "
        "after it (or remove both, and the block is appended); nothing was written"
    )


def update_generated_block(text: str, suite: str, what: str, content: str) -> str:
    """``text`` with the block of (suite, what) replaced by ``content``; appended when it has none.
    Markers that do not pair up are a :class:`GeneratedBlockError`, never a guess."""
    begin, end = _markers(suite, what)
    block = f"{begin}\n{content.rstrip()}\n{end}"
    span = _marker_span(text, suite, what)
    if span is not None:
        return text[: span[0]] + block + text[span[1] :]
    return text.rstrip("\n") + "\n\n" + block + "\n"
