"""The per-run curves of the two Wortsman et al. signals, and their figure (one column per LR)."""

from __future__ import annotations

import pandas as pd

from andrea_lab.experiments.compare import plots
from andrea_lab.experiments.compare.runs_table import precursor_curves


class Variant:
    def __init__(self, name: str, rows: pd.DataFrame):
        self.name, self.rows = name, rows


def test_the_attention_curve_is_the_largest_logit_of_any_block_per_step():
    curves = {
        "stability/attn_logit_max/block_00": [(0, 1.0), (10, 5.0)],
        "stability/attn_logit_max/block_01": [(0, 2.0), (10, 3.0)],
        "stability/attn_logit_max_head/block_00_h0": [(0, 99.0)],  # another metric: not read
        "stability/log_z": [(0, 5.5), (10, 5.0)],
    }
    assert precursor_curves(curves) == {"attn_logit_curve": [(0, 2.0), (10, 5.0)], "log_z_curve": [(0, 5.5), (10, 5.0)]}
    assert precursor_curves({}) == {"attn_logit_curve": [], "log_z_curve": []}


def test_the_figure_has_a_column_per_lr_and_is_skipped_without_curves(tmp_path):
    rows = pd.DataFrame(
        {
            "lr": [1e-2, 1e-2, 1e-1],
            "attn_logit_curve": [[(0, 1.0), (10, 4.0)], [(0, 2.0), (10, 8.0)], [(0, 1.0), (10, 1e4)]],
            "log_z_curve": [[(0, 5.5), (10, 5.0)], [(0, 5.4), (10, 5.1)], [(0, 5.5), (10, -3.0)]],
        }
    )
    path = plots.plot_precursors([Variant("baseline", rows)], tmp_path / "precursors.png")
    assert path is not None and path.stat().st_size > 0
    bare = rows.assign(attn_logit_curve=[[], [], []])
    assert plots.plot_precursors([Variant("baseline", bare)], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
