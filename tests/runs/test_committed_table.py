"""The key the sweep and compare both give a run of a committed table: a planned run and its table row (an empty
scale cell read as NaN, the seed as a float) get the same key, and its label is the sweep's own."""

from __future__ import annotations

import math
from pathlib import Path

from andrea_lab.experiments.sweep.plan import RunSpec
from andrea_lab.runs.committed_table import is_missing, key_of, label


def spec(scale):
    return RunSpec(1, 1, "s", "pre", 0.002, 400, Path("runs/s/pre/lr2e-3-seed400"), ("python",), scale=scale)


def test_a_planned_run_and_its_table_row_share_one_key_and_the_sweeps_label():
    for scale, cell in ((None, math.nan), ("blocks24", "blocks24")):
        planned = spec(scale)
        assert key_of(planned.scale, planned.variant, planned.lr, planned.seed) == key_of(cell, "pre", 0.002, 400.0)
        assert label(key_of(cell, "pre", 0.002, 400.0)) == planned.label
    assert is_missing(None) and is_missing(math.nan) and not is_missing(0.0) and not is_missing("blocks6")
