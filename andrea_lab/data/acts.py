"""A play cut into its acts: the document unit of the ``shakespeare`` corpus.

Why an act and not a play: a document is the unit the split draws at random (by its family's hash) and
the unit of the held-out score's standard error (heldout.py), and that error is honest when the two are
the same unit. With plays, 5-10 % of ~40 families is 2-4 held-out plays: no error can be estimated from
so few, and one play would carry a third of the score. With acts there are ~340 documents (~170
families), so a held-out side of 10 % holds ~35 of them, none with more than a few percent of the tokens.
Scenes would give more, but the First Folio marks scenes in few plays, so its editions could not be
matched scene by scene; it marks acts in most.

An act starts at a heading line (``ACT III.``, ``Act 3``, ``ACT THIRD``, ``Actus Tertius. Scena Prima.``)
whose number differs from the act before: the Gutenberg texts of some plays repeat ``ACT I.`` before every
scene. Whatever precedes the first act (title, cast list) belongs to the first. A text with fewer than two such
headings (a poem, a Folio play printed without act divisions) is cut at blank lines into pieces of about
:data:`PIECE_CHARS` (an act's typical length), so that no document is a whole play: one such document
would carry a fifth of a held-out side's tokens. So is an act longer than twice that (the Folio's
*Hamlet* marks only acts I and II: its "act II" runs to the end).
"""

from __future__ import annotations

import math
import re

#: The length an undivided text is cut to (characters): about an act (the corpus's acts average ~27,000).
PIECE_CHARS = 30_000

_ORDINALS = {
    **{roman: number for number, roman in enumerate(("i", "ii", "iii", "iv", "v"), start=1)},
    **{str(number): number for number in range(1, 6)},
    **{word: number for number, word in enumerate(("first", "second", "third", "fourth", "fifth"), start=1)},
    **{
        latin: number
        for number, forms in enumerate(
            (
                ("primus", "prima"),
                ("secundus", "secunda"),
                ("tertius", "tertia"),
                ("quartus", "quarta"),
                ("quintus", "quinta"),
            ),
            start=1,
        )
        for latin in forms
    },
}
#: A short line that begins with "Act" or "Actus" and a word or number (its ordinal is checked apart).
_HEADING = re.compile(r"^[ \t]*act(?:us)?[ \t]+([a-z0-9]+)\b[^\n]{0,60}$", re.IGNORECASE | re.MULTILINE)


def split_acts(text: str) -> list[tuple[int, str]]:
    """``[(act number, text), ...]`` in order, the texts joined giving ``text`` back; for a text not divided
    into at least two acts, its pieces (:func:`pieces`) numbered 0; an act over twice :data:`PIECE_CHARS`
    long is cut into pieces too, each with the act's number."""
    starts: list[tuple[int, int]] = []
    for match in _HEADING.finditer(text):
        number = _ORDINALS.get(match.group(1).lower())
        if number is not None and (not starts or number != starts[-1][1]):
            starts.append((match.start(), number))
    if len(starts) < 2:
        return [(0, piece) for piece in pieces(text)]
    bounds = [0, *(start for start, _ in starts[1:]), len(text)]
    acts = [(number, text[bounds[i] : bounds[i + 1]]) for i, (_, number) in enumerate(starts)]
    return [(number, piece) for number, act in acts for piece in (pieces(act) if len(act) > 2 * PIECE_CHARS else [act])]


def pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """``text`` cut into ``round(len / size)`` (at least one) pieces of near-equal length, each cut moved to
    the blank line nearest it (a stanza, a speech), the pieces joined giving ``text`` back."""
    count = max(1, round(len(text) / size))
    if count == 1:
        return [text]
    blank_lines = [match.end() for match in re.finditer(r"\n[ \t]*\n", text)]
    cuts = [0]
    for k in range(1, count):
        target = math.floor(len(text) * k / count)
        nearest = min(blank_lines, key=lambda at: abs(at - target), default=target)
        if cuts[-1] < nearest < len(text):
            cuts.append(nearest)
    cuts.append(len(text))
    return [text[a:b] for a, b in zip(cuts, cuts[1:])]
