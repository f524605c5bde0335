"""The cost notes: the suite's fits summed, and each speed path's mean wall time where the runs took several."""

from __future__ import annotations

import pandas as pd

from andrea_lab.experiments.compare.costs import cost_notes, path_cost_notes


def _runs(rows):
    return pd.DataFrame(rows, columns=["variant", "precision", "compiled", "wall_time_s"])


def test_each_speed_path_gets_its_mean_fit_time_and_fits_per_hour_against_the_slowest():
    runs = _runs(
        [
            ("fp32", "32-true", 0, 1000.0),
            ("fp32", "32-true", 0, 1020.0),
            ("bf16", "bf16-mixed", 0, 500.0),
            ("bf16", "bf16-mixed", 0, 520.0),
            ("bf16_compiled", "bf16-mixed", 1, 640.0),
            ("bf16_compiled", "bf16-mixed", None, None),  # an unfinished run: no time, not counted
        ]
    )
    (note,) = path_cost_notes(runs)
    assert note.endswith("fp32 1010 s a fit (n=2); bf16-mixed, compiled 640 s a fit (n=1, 1.58x the fits per hour); "
                         "bf16-mixed 510 s a fit (n=2, 1.98x the fits per hour)")  # fmt: skip
    assert cost_notes(runs)[1] == note and cost_notes(runs)[0].startswith("cost here: 5 fits took")


def test_a_stopped_runs_time_is_not_a_fits():
    runs = _runs([("a", "32-true", 0, 100.0), ("b", "bf16-mixed", 0, 50.0), ("b", "bf16-mixed", 0, 10.0)])
    runs["status"] = ["finished", "finished", "interrupted"]
    (note,) = path_cost_notes(runs)
    assert note.endswith("fp32 100 s a fit (n=1); bf16-mixed 50 s a fit (n=1, 2.00x the fits per hour)")


def test_one_path_or_no_recorded_precision_adds_no_path_note():
    one = _runs([("a", "32-true", None, 10.0), ("b", "32", None, 12.0)])  # "32" and "32-true" are one precision
    assert path_cost_notes(one) == [] and len(cost_notes(one)) == 1
    assert path_cost_notes(one.drop(columns=["precision"])) == []
    assert path_cost_notes(one.drop(columns=["compiled"]).assign(precision=["32-true", "bf16-mixed"])) != []


def test_a_merged_tables_rows_without_a_compile_take_their_variants_when_its_runs_agree():
    # A committed table from before runs.csv's compiled column, merged with new runs that record it.
    runs = _runs(
        [
            ("bf16_compiled", "bf16-mixed", None, 650.0),  # the table's row
            ("bf16_compiled", "bf16-mixed", 1, 640.0),  # a new run
            ("bf16", "bf16-mixed", None, 500.0),
            ("bf16", "bf16-mixed", 0, 520.0),
            ("mixed", "bf16-mixed", 0, 900.0),  # runs of one variant that disagree: the unsaid one stays unsaid
            ("mixed", "bf16-mixed", 1, 900.0),
            ("mixed", "bf16-mixed", None, 900.0),
        ]
    )
    (note,) = path_cost_notes(runs)
    assert "bf16-mixed, compile not recorded 900 s a fit (n=1)" in note
    assert "bf16-mixed, compiled 730 s a fit (n=3," in note and "bf16-mixed 640 s a fit (n=3," in note
