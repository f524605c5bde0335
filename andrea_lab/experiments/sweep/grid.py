"""A suite's LR and seed grids: each value parsed and checked, and the grid's size capped before it is parsed.

Why a module of its own: the grids are read from three places (a suite file, ``andrea sweep --lrs/--seeds``,
a ladder rung's own grid) and must be refused by the same rules, each in one line naming the value.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Optional

from andrea_lab.experiments.sweep.suite_keys import SuiteError
from andrea_lab.runs.directory import format_lr

#: The most runs a suite may plan (scales x variants' LRs x seeds). The largest committed suite (placements.yaml)
#: plans 300; a grid past this is a mistake or an attack (:func:`check_grid_size`).
MAX_RUNS = 10_000


def parse_lr(value: Any, where: str) -> float:
    """A learning rate from YAML or the command line (PyYAML reads ``1e-3`` as a string)."""
    if isinstance(value, bool):
        raise SuiteError(f"{where}: {value!r} is not a learning rate")
    try:
        lr = float(value)
    except (TypeError, ValueError):
        raise SuiteError(f"{where}: {value!r} is not a number") from None
    if not (math.isfinite(lr) and lr > 0):
        raise SuiteError(f"{where}: learning rate {value!r} must be a finite number > 0")
    return lr


def parse_seed(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise SuiteError(f"{where}: {value!r} is not a seed")
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise SuiteError(f"{where}: seed {value!r} must be an integer >= 0")
    return value


def parse_grid(values: Iterable[Any], kind: str, where: str, label: Optional[str] = None) -> tuple:
    """A non-empty grid of learning rates (``kind='lrs'``) or seeds without repeats."""
    values = list(values)
    if not values:
        raise SuiteError(f"{where}: {kind} is an empty grid; give at least one value")
    parse = parse_lr if kind == "lrs" else parse_seed
    if len(values) > MAX_RUNS:
        raise SuiteError(f"{where}: {kind} lists {len(values):,} values; a suite plans at most {MAX_RUNS:,} runs")
    grid = [parse(value, label or f"{where}: {kind}") for value in values]
    seen: set[str] = set()
    for index, value in enumerate(grid):
        text = format_lr(value) if kind == "lrs" else str(value)
        if text in seen:
            raise SuiteError(
                f"{where}: {kind} lists {values[index]!r} twice" + (f" (as {text})" if kind == "lrs" else "")
            )
        seen.add(text)
    return tuple(grid)


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def check_grid_size(document: dict, where: str) -> None:
    """Refuse a suite whose grid (scales x variants' LRs x seeds, counted from the lists as written, before any
    of them is parsed) is more than :data:`MAX_RUNS` runs: a 0.68 MB file of 30,000 LRs and 30,000 seeds stands
    for 900 million runs, and planning them (even ``--dry-run``) would take hours."""
    suite_lrs, seeds = _length(document.get("lrs")), _length(document.get("seeds"))
    variants = document.get("variants") if isinstance(document.get("variants"), list) else []
    lrs = sum(
        _length(v.get("lrs")) if isinstance(v, dict) and v.get("lrs") is not None else suite_lrs for v in variants
    )
    scales = max(1, _length(document.get("scales")))
    runs = scales * lrs * seeds
    if runs > MAX_RUNS:
        at_scales = f" x {scales:,} scales" if scales > 1 else ""
        raise SuiteError(
            f"{where}: the grid is {runs:,} runs ({lrs:,} LRs over {len(variants):,} variants x {seeds:,} seeds"
            f"{at_scales}), more than the {MAX_RUNS:,} a suite may plan; split it into smaller suites"
        )


def parse_cli_list(text: str, kind: str) -> tuple:
    """``--lrs 1e-3,3e-3`` / ``--seeds 0,1``."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    return parse_grid(items, kind, f"--{kind}", label=f"--{kind}")
