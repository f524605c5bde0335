"""The suite option ``extend_grid:``: how far ``andrea sweep`` may extend an LR grid whose best LR is at an edge.

::

    extend_grid: {max_extensions: 2, factor: 2}

After the planned runs end, a (scale, variant) whose best LR sits at the lowest or highest LR of its grid gets
one more LR beyond that edge (the edge's LR divided or multiplied by ``factor``), at every seed of its grid;
this repeats until the optimum is inside the grid or ``max_extensions`` LRs were added to that (scale,
variant) (:mod:`andrea_lab.experiments.sweep.grid_extension` runs it). Why: ``andrea compare`` does not
judge a claim whose variant's optimum is at an edge (:mod:`andrea_lab.experiments.compare.optimum_edges`):
the sweep can find the optimum itself instead of leaving a hole for a later session.

The ceiling is required: without it the search is unbounded (a variant that trains better the lower its LR
would be run at ever smaller LRs). Checked when the suite loads, so that a bad value is one line and exit 2
before any run: a ceiling that is not a whole number from 0 to :data:`MOST_EXTENSIONS`, a factor that is
not a number above 1 (the grid would not grow) and at most :data:`LARGEST_FACTOR`, and a variant with a
grid of one LR, which has no inside for an optimum to be in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from andrea_lab.experiments.sweep.suite_keys import SuiteError, check_section
from andrea_lab.runs.directory import format_lr

EXTEND_GRID_KEYS = ("max_extensions", "factor")
#: The most LRs one (scale, variant) may gain: at factor 2 that is 64x beyond the suite's grid, far past any
#: optimum a grid was written around; more is a grid written in the wrong place.
MOST_EXTENSIONS = 6
#: A decade per step at most: a wider step skips over the optimum it is looking for.
LARGEST_FACTOR = 10.0
EXAMPLE = "e.g. extend_grid: {max_extensions: 2, factor: 2}"


@dataclass(frozen=True)
class ExtendGrid:
    """At most ``max_extensions`` LRs added per (scale, variant), each ``factor`` beyond the edge before it."""

    max_extensions: int
    factor: float = 2.0

    def describe(self) -> str:
        return (
            f"extend_grid: a (scale, variant) whose best LR is at its grid's edge gets one more LR beyond it "
            f"(x{self.factor:g} or /{self.factor:g}), up to {self.max_extensions} per (scale, variant)"
        )


def parse_extend_grid(value: Any, where: str, grids: Mapping[str, Sequence[float]]) -> Optional[ExtendGrid]:
    """``extend_grid:`` of a suite (None: absent, no extension); ``grids``: each variant's LR grid."""
    if value is None:
        return None
    check_section(value, where, EXTEND_GRID_KEYS, EXAMPLE)
    ceiling = value.get("max_extensions")
    if ceiling is None:
        raise SuiteError(
            f"{where}: max_extensions is required (the most LRs added per scale and variant, 0 to "
            f"{MOST_EXTENSIONS}): without a ceiling the search is unbounded; {EXAMPLE}"
        )
    if isinstance(ceiling, bool) or not isinstance(ceiling, int) or not 0 <= ceiling <= MOST_EXTENSIONS:
        raise SuiteError(
            f"{where}: max_extensions {ceiling!r} is not a whole number from 0 to {MOST_EXTENSIONS} "
            f"(LRs added per scale and variant)"
        )
    factor = value.get("factor", 2.0)
    number = isinstance(factor, (int, float)) and not isinstance(factor, bool)
    if not number or not math.isfinite(factor) or not 1 < factor <= LARGEST_FACTOR:
        raise SuiteError(
            f"{where}: factor {factor!r} is not a number above 1 and at most {LARGEST_FACTOR:g} (the step "
            f"beyond the edge: 2 doubles or halves the edge's LR)"
        )
    for name, grid in grids.items():
        if len(grid) < 2:
            raise SuiteError(
                f"{where}: variant {name!r} runs at one LR ({', '.join(format_lr(lr) for lr in grid)}), which "
                "has no inside for an optimum to be in; give it at least 2 lrs, or drop extend_grid"
            )
    return ExtendGrid(ceiling, float(factor))
