"""compare.table_merge on constructed tables: the table's rows stand for the runs it holds and a rerun of one of
them (the witness) must equal its row to the bit; a column the table never measured (the held-out test documents'
loss, in a table made before the split) is blanked in the new runs, so the merged suite is scored one way."""

from __future__ import annotations

import pandas as pd
import pytest
from andrea_testing import finished_scaled_run

from andrea_lab.experiments.compare.runs_table import read_runs_csv, write_runs_csv
from andrea_lab.experiments.compare.table_merge import merged


def run(lr: float, seed: int, loss: float, **columns) -> dict:
    return finished_scaled_run("s", "pre", 0, lr, seed, loss, "d64", 0, **columns)


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "runs.csv"
    write_runs_csv(pd.DataFrame([run(1e-3, seed, 2.0 + seed / 10) for seed in range(3)]), path)
    assert "heldout_test_loss" not in path.read_text().splitlines()[0]
    return path


def test_the_new_runs_join_the_table_and_what_it_never_measured_is_blanked(table):
    new = pd.DataFrame([run(1e-3, 0, 2.0, heldout_test_loss=1.9), run(2e-3, 0, 1.8, heldout_test_loss=1.7)])
    result = merged(new, table)
    assert sorted(zip(result["lr"], result["seed"])) == [(1e-3, 0), (1e-3, 1), (1e-3, 2), (2e-3, 0)]
    assert result["heldout_test_loss"].isna().all(), "the table scored all documents; so are the new runs"
    assert result.loc[result["lr"] == 2e-3, "heldout_loss"].tolist() == [1.8]


def test_how_the_new_runs_were_made_is_kept_where_the_table_did_not_record_it(table):
    """compiled scores nothing: the new runs keep it (the table's rows stay unsaid), so the path costs and a later
    --from-table know which were compiled."""
    new = pd.DataFrame([run(1e-3, 0, 2.0, compiled=1), run(2e-3, 0, 1.8, compiled=1)])
    result = merged(new, table)
    assert result.loc[result["lr"] == 2e-3, "compiled"].tolist() == [1]
    assert result.loc[result["seed"] != 0, "compiled"].isna().all()


def test_a_rerun_off_by_one_ulp_is_refused_naming_both_values(table):
    drifted = 2.0 + 4.440892098500626e-16
    with pytest.raises(ValueError, match=r"the rerun d64 pre lr=1e-3 seed=0 has final_val_loss 2.0000000000000004"):
        merged(pd.DataFrame([run(1e-3, 0, drifted), run(2e-3, 0, 1.8)]), table)


def test_new_runs_at_a_scale_without_a_witness_are_refused(table):
    with pytest.raises(ValueError, match=r"no run here reruns one of the table's at scale\(s\) d64"):
        merged(pd.DataFrame([run(2e-3, 0, 1.8)]), table)


def higher_rung(lr: float, seed: int, loss: float) -> dict:
    return finished_scaled_run("s", "pre", 0, lr, seed, loss, "d128", 1)


def test_a_scale_the_table_never_held_joins_on_a_witness_at_another_scale(table):
    """A ladder's next rung made across sessions: the table has none of its runs to rerun, so the witness at the
    table's scale shows this machine reruns it, and the new rung's runs are compared among themselves."""
    result = merged(pd.DataFrame([run(1e-3, 0, 2.0), higher_rung(1e-3, 0, 1.5)]), table)
    assert sorted(result["scale"]) == ["d128", "d64", "d64", "d64"]


def test_a_scale_the_table_never_held_still_needs_one_witness(table):
    with pytest.raises(ValueError, match=r"no run here reruns one of the table's at scale\(s\) any"):
        merged(pd.DataFrame([higher_rung(1e-3, 0, 1.5)]), table)


def test_another_suites_runs_are_refused(table, tmp_path):
    other = pd.DataFrame([finished_scaled_run("other", "pre", 0, 2e-3, 0, 1.8, "d64", 0)])
    with pytest.raises(ValueError, match=r"of several suites \(other, s\)"):
        merged(other, table)
    assert len(read_runs_csv(table)) == 3, "the table is read, never written"


def test_a_table_holding_one_run_twice_is_refused(table):
    twice = read_runs_csv(table)
    write_runs_csv(pd.concat([twice, twice.iloc[:1]]), table)
    with pytest.raises(ValueError, match="holds one run twice"):
        merged(pd.DataFrame([run(1e-3, 0, 2.0), run(2e-3, 0, 1.8)]), table)


def test_a_run_the_table_holds_as_stopped_is_replaced_by_the_one_that_ended_here(table):
    """A session's end leaves interrupted rows in the committed table (their loss is mid-run); the next session
    resumes them, and the ended run stands for them: not a witness that failed to reproduce a mid-run loss."""
    stopped = read_runs_csv(table)
    stopped.loc[stopped["seed"] == 2, "status"] = "interrupted"
    write_runs_csv(stopped, table)
    result = merged(pd.DataFrame([run(1e-3, 0, 2.0), run(1e-3, 2, 1.7)]), table)
    assert sorted(zip(result["seed"], result["status"], result["final_val_loss"])) == [
        (0, "finished", 2.0),
        (1, "finished", 2.1),
        (2, "finished", 1.7),
    ]


def test_a_merged_table_writes_its_whole_number_columns_as_whole_numbers(table, tmp_path):
    """The table's rows (nullable integers) and the new runs' records (plain objects, or floats where a new
    run lacks a value) once concatenated held floats, and a regenerated runs.csv read "65536.0" and "63.0" where
    the committed one read "65536" and "63": a diff of every row for no change of a number."""
    new = pd.DataFrame([run(1e-3, 0, 2.0), higher_rung(1e-3, 0, 1.5)])
    new["divergence_step"] = [float("nan"), 63.0]
    written = tmp_path / "merged.csv"
    write_runs_csv(merged(new, table), written)
    rows = pd.read_csv(written, dtype=str, keep_default_na=False)
    assert list(rows["divergence_step"]) == ["", "", "", "63"] and list(rows["seed"]) == ["0", "1", "2", "0"]
