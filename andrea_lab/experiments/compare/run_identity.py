"""Every row of a handed ``runs.csv`` says which run it is: its suite, variant, learning rate and seed.

``andrea compare`` groups and pairs runs by these four cells; a row with one of them empty (a hand-edited or
truncated table) reached the grouping as None and ended in a TypeError (sorting None among names, a path
joined with None). A row without them is refused instead, in one line naming its line and column.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from andrea_lab.errors import UsageError

#: The cells that name a run; numbers among them must be finite.
IDENTITY_COLUMNS = ("suite", "variant", "lr", "seed")


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or value == "" or (isinstance(value, float) and not math.isfinite(value))


def check_identity(table: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """``table`` (read from ``path``, typed: a column it lacks is all empty), or :class:`UsageError` at the
    first row missing an identity cell."""
    for column in IDENTITY_COLUMNS:
        for position, value in enumerate(table[column]):
            if _missing(value):
                raise UsageError(
                    f"{path}, line {position + 2}: the {column!r} cell is empty or not a number; every run needs "
                    f"its {', '.join(IDENTITY_COLUMNS)} (a runs.csv as andrea compare writes it)"
                )
    return table
