"""Every row of a handed ``runs.csv`` says which run it is (its suite, variant, learning rate and seed), and a
count read from a handed run is a whole number pandas can hold.

``andrea compare`` groups and pairs runs by these four cells; a row with one of them empty (a hand-edited or
truncated table) reached the grouping as None and ended in a TypeError (sorting None among names, a path
joined with None). A row without them is refused instead, in one line naming its line and column. A count
(steps, seed, warmup_steps) that is not a whole number within int64 (a run recorded with warmup_steps 1e21,
or an edited 2.5) made pandas' integer column raise; it is read as missing, as any other unreadable number.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from andrea_lab.errors import UsageError

#: The cells that name a run; numbers among them must be finite.
IDENTITY_COLUMNS = ("suite", "variant", "lr", "seed")


def whole_numbers(column: pd.Series) -> pd.Series:
    """``column`` as pandas' nullable integers: what is not a whole number within int64 becomes missing."""
    numbers = pd.to_numeric(column, errors="coerce").astype(float)
    return numbers.where((numbers % 1 == 0) & (numbers.abs() < 2.0**63)).astype("Int64")


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
