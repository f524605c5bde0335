"""Text cells of the CSVs ``andrea compare`` writes, safe to open in a spreadsheet.

A spreadsheet reads a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return as a formula
(OWASP's "CSV injection"): a variant named ``=HYPERLINK(...)`` in a handed ``sweep-run.json``, a run's path, a
claim's text from a suite would run as one when ``runs.csv`` is opened. Such a cell is written with a leading
single quote, which spreadsheets show as text. Only the columns that carry handed text are touched (names,
paths, a claim's words): numbers, and the computed text that starts with a sign (``+0.174 [+0.134, +0.214]``),
are written as before.

So that a table reads back as it was written, a cell that already starts with a quote gets one more, and
:func:`restored` takes exactly one off: ``read_runs_csv`` gives back the names the runs had.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

#: A cell starting with one of these is a formula to a spreadsheet.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: What makes such a cell text.
QUOTE = "'"
#: The columns of compare's tables whose cells come from handed text (a run's names, paths and records, a suite's
#: claims), besides the string columns of runs.csv (andrea_lab.experiments.compare.runs_table).
HANDED_TEXT_COLUMNS = ("suite", "variant", "scale", "claim", "text", "evidence", "path", "a", "b")


def as_text(value: Any) -> Any:
    """``value`` with a leading quote when it is a string a spreadsheet would take for a formula (or starts with
    the quote itself); anything else unchanged."""
    if isinstance(value, str) and value.startswith((*FORMULA_STARTS, QUOTE)):
        return QUOTE + value
    return value


def _from_text(value: Any) -> Any:
    return value[1:] if isinstance(value, str) and value.startswith(QUOTE) else value


def _apply(frame: pd.DataFrame, columns: Iterable[str], cell: Any) -> pd.DataFrame:
    present = [column for column in dict.fromkeys(columns) if column in frame.columns]
    if not present:
        return frame
    frame = frame.copy()
    for column in present:
        frame[column] = frame[column].map(cell, na_action="ignore")
    return frame


def neutralised(frame: pd.DataFrame, columns: Iterable[str] = HANDED_TEXT_COLUMNS) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells in ``columns`` are safe in a spreadsheet (:func:`as_text`)."""
    return _apply(frame, columns, as_text)


def restored(frame: pd.DataFrame, columns: Iterable[str] = HANDED_TEXT_COLUMNS) -> pd.DataFrame:
    """``frame`` as it was before :func:`neutralised` (one leading quote taken off each text cell that has one)."""
    return _apply(frame, columns, _from_text)


def write_csv(frame: pd.DataFrame, path: str | Path, columns: Iterable[str] = HANDED_TEXT_COLUMNS) -> None:
    """``frame`` as CSV (no index) with its handed text neutralised."""
    neutralised(frame, columns).to_csv(path, index=False)
