"""What ``andrea sweep --from-table`` (andrea_lab.experiments.sweep.from_table) and ``andrea compare --from-table``
(andrea_lab.experiments.compare.table_merge) must agree on about a committed table and the runs that extend it:
a run's key, the numbers a rerun reproduces to the bit, and the record the sweep leaves. Here, in the package both
import, because the compare package does not import the sweep's: two copies could drift apart, and a key written
one way and read another would match no run.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from andrea_lab.runs.directory import format_lr

#: In a suite's runs directory made by the sweep: the committed table its runs extend (compare refuses them alone).
RECORD = "from-table.json"
#: The numbers a rerun of a table's run must reproduce to the bit, in this order.
WITNESSED = ("initial_val_loss", "final_val_loss", "heldout_loss")
#: The table's column saying whether a run compiled (compare.run_columns): the sweep keeps a rung on it.
COMPILED = "compiled"
#: A run's place in a suite: (scale, variant, LR as format_lr writes it, seed).
Key = tuple[Optional[str], str, str, int]


def is_missing(value: Any) -> bool:
    """A cell a table leaves empty: None, or NaN as pandas reads an empty cell."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def compiled_of(value: Any) -> Optional[bool]:
    """A :data:`COMPILED` cell: 1 or 0; anything else (empty, or a handed table's other text) does not say."""
    try:
        return None if is_missing(value) else {0: False, 1: True}.get(value)
    except TypeError:  # unhashable, or pandas' NA
        return None


def key_of(scale: Any, variant: str, lr: float, seed: Any) -> Key:
    """The run's key, from a planned run or a table's row (an empty scale cell: a suite without scales)."""
    return (None if is_missing(scale) else scale, variant, format_lr(lr), int(seed))


def label(key: Key) -> str:
    """The key as the sweep labels a run: ``blocks24 pre lr=2e-3 seed=400``."""
    scale, variant, lr, seed = key
    return f"{scale + ' ' if scale else ''}{variant} lr={lr} seed={seed}"
