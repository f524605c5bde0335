"""andrea sweep --search-record carries a search over from an earlier session whose runs directory is gone: the
record's points stand for their tuning runs, one (the witness) is rerun first and alone and must reproduce its
loss to the bit, and the search then goes on along the path it would have taken in one sweep. A record that
does not rerun, or is of another suite's search, is refused. With the stand-in fits of test_search_runs."""

from __future__ import annotations

import json
import shutil

import test_search_runs as search_runs_test
from test_search_runs import StandInFits, loss, record, sweep, write_suite

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.sweep import search_ledger, search_runs


def stopped_session(tmp_path, monkeypatch, capsys, stop_after: int = 9):
    """A first session: the search stopped after ``stop_after`` fits; its record copied out (committed), its runs
    directory then gone. Returns the suite file, the committed record and the fits it made."""
    suite_file, runs = write_suite(tmp_path / "first"), tmp_path / "first" / "runs"
    killed = StandInFits(stop_after=stop_after)
    assert sweep(monkeypatch, suite_file, runs, killed) == sweep_command.EXIT_FAILED_RUNS
    committed = tmp_path / "committed" / "search.json"
    committed.parent.mkdir()
    shutil.copy(runs / "tuned" / search_runs.RECORD, committed)
    shutil.rmtree(runs)
    capsys.readouterr()
    return suite_file, committed, killed.started


def test_a_search_carried_over_reruns_only_its_witness_and_ends_where_one_sweep_would(tmp_path, monkeypatch, capsys):
    whole = StandInFits()
    assert sweep(monkeypatch, write_suite(tmp_path / "whole"), tmp_path / "whole" / "runs", whole) == 0
    suite_file, committed, first = stopped_session(tmp_path, monkeypatch, capsys)
    entries = {e["variant"]: e for e in json.loads(committed.read_text())["searches"]}
    assert entries["adamw"]["reason"] == search_runs.IN_PROGRESS, "a stopped search leaves its record so far"

    later = StandInFits()
    runs = tmp_path / "second" / "runs"
    assert sweep(monkeypatch, suite_file, runs, later, "--search-record", str(committed)) == 0
    witness = later.started[:2]
    assert witness == [("adamw", 2.5e-4, 0.1, 900), ("adamw", 2.5e-4, 0.1, 901)], "the first recorded point, alone"
    tuning = [key for key in later.started[2:] if key[3] >= 900]
    assert set(tuning) & set(first) == {("adamw", 4e-3, 0.1, 900)}, "only a point half run (1 of 2 seeds) again"
    assert set(first) | set(later.started) == set(whole.started), "together: the one sweep's runs"
    assert record(runs) == {
        variant: {**entry, "from_record": record(runs)[variant]["from_record"]}
        for variant, entry in record(tmp_path / "whole" / "runs").items()
    }, "the same path, best point and spending as one sweep"
    assert record(runs)["adamw"]["from_record"] == {"record": str(committed), "points": 3}


class Drifted(StandInFits):
    """Fits on another machine: every loss 1e-12 off."""

    def launch(self, run_dir, command, marker, slot):
        code = super().launch(run_dir, command, marker, slot)
        key = self.started[-1]
        self.finish(run_dir, loss(*key) + 1e-12)
        return code


def test_a_witness_that_does_not_reproduce_the_record_stops_the_search_before_any_other_run(
    tmp_path, monkeypatch, capsys
):
    suite_file, committed, _ = stopped_session(tmp_path, monkeypatch, capsys)
    fits = Drifted()
    runs = tmp_path / "second" / "runs"
    assert sweep(monkeypatch, suite_file, runs, fits, "--search-record", str(committed)) == 1
    assert fits.started == [("adamw", 2.5e-4, 0.1, 900), ("adamw", 2.5e-4, 0.1, 901)]
    err = capsys.readouterr().err.strip()
    assert "the witness adamw {'model.lr': 0.00025, 'model.weight_decay': 0.1} reran to a loss of" in err
    assert "run the search without --search-record" in err


def test_a_record_of_another_search_is_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    suite_file, committed, _ = stopped_session(tmp_path, monkeypatch, capsys)
    document = json.loads(committed.read_text())
    document["searches"][0]["tuning_seeds"] = [7]
    committed.write_text(json.dumps(document))
    fits = StandInFits()
    assert sweep(monkeypatch, suite_file, tmp_path / "r", fits, "--search-record", str(committed)) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a search record of tuned" not in err and "tuning seeds [7] are not the suite's" in err
    assert len(err.splitlines()) == 1 and fits.started == []


def test_a_dry_run_refreshes_a_stopped_searchs_record_and_never_starts_one(tmp_path, monkeypatch, capsys):
    suite_file, runs = write_suite(tmp_path), tmp_path / "runs"
    assert sweep(monkeypatch, suite_file, runs, StandInFits(), "--dry-run") == 0
    assert not (runs / "tuned").exists(), "a dry run on nothing writes nothing"
    assert sweep(monkeypatch, suite_file, runs, StandInFits(stop_after=9)) == sweep_command.EXIT_FAILED_RUNS
    path = runs / "tuned" / search_runs.RECORD
    path.unlink()  # as if the sweep was stopped before its record was written
    assert sweep(monkeypatch, suite_file, runs, StandInFits(), "--dry-run") == 0
    assert {e["reason"] for e in json.loads(path.read_text())["searches"]} == {search_runs.IN_PROGRESS}


def test_the_witness_runs_before_a_cell_the_record_does_not_hold_settles_and_its_judged_runs_still_run(
    tmp_path, monkeypatch, capsys
):
    # adamw's descent ended in this directory (its judged runs not yet made); the record holds only lion's points.
    suite_file, runs = write_suite(tmp_path), tmp_path / "runs"
    assert sweep(monkeypatch, suite_file, runs, StandInFits()) == 0
    document = json.loads((runs / "tuned" / search_runs.RECORD).read_text())
    committed = tmp_path / "search.json"
    committed.write_text(
        json.dumps({**document, "searches": [e for e in document["searches"] if e["variant"] == "lion"]})
    )
    for gone in (runs / "tuned", runs / "tuned@tuning" / "lion"):
        shutil.rmtree(gone)
    capsys.readouterr()
    fits = StandInFits()
    assert sweep(monkeypatch, suite_file, runs, fits, "--search-record", str(committed)) == 0
    assert {key[0] for key in fits.started[:2]} == {"lion"}, "the record's witness first"
    assert [key[3] for key in fits.started if key[0] == "adamw"] == [100, 101, 102], "its judged runs, in this sweep"


def recorded(path) -> dict[str, set]:
    """Each variant's finished points in a record, on its path or earlier ones, as (lr, weight decay) pairs."""
    out: dict[str, set] = {}
    for entry in json.loads(path.read_text())["searches"]:
        described = [p for step in entry["path"] for p in step["points"]] + entry.get("earlier_points", [])
        finished = {(p["point"]["model.lr"], p["point"]["model.weight_decay"]) for p in described if p["loss"]}
        out[entry["variant"]] = finished
    return out


def test_a_search_amended_between_sessions_keeps_its_earlier_paths_points_so_none_is_run_again(
    tmp_path, monkeypatch, capsys
):
    # Lion's weight decay optimum (0.8) lies beyond the values: the first session ends at the edge (0.4); the
    # suite is then amended (extensions, a larger budget), and the descent leaves the first session's path.
    monkeypatch.setitem(search_runs_test.MINIMA, "lion", (5.0e-4, 0.8))
    first_suite, first_runs = write_suite(tmp_path / "first"), tmp_path / "first" / "runs"
    first = StandInFits()
    assert sweep(monkeypatch, first_suite, first_runs, first) == 0
    committed = tmp_path / "first.json"
    shutil.copy(first_runs / "tuned" / search_runs.RECORD, committed)
    amended = write_suite(tmp_path / "amended", {**search_runs_test.SEARCH, "budget": 20, "max_extensions": 2})

    second_runs = tmp_path / "second" / "runs"  # a fresh clone: the first runs directory is gone
    stopped = StandInFits(stop_after=4)
    assert sweep(monkeypatch, amended, second_runs, stopped, "--search-record", str(committed)) != 0
    refreshed = second_runs / "tuned" / search_runs.RECORD
    lion = json.loads(refreshed.read_text())["searches"]
    assert any(e.get("earlier_points") for e in lion), "the first path's points beyond the new path's are kept"
    kept, before = recorded(refreshed), recorded(committed)
    assert all(kept[variant] >= points for variant, points in before.items()), "no finished point forgotten"

    third = StandInFits()
    assert sweep(monkeypatch, amended, tmp_path / "third" / "runs", third, "--search-record", str(refreshed)) == 0
    tuning = lambda fits: {key for key in fits.started if key[3] >= 900}  # noqa: E731
    assert len(tuning(third) & (tuning(first) | tuning(stopped))) == 2, "only the witness point (2 seeds) again"
    assert record(tmp_path / "third" / "runs")["lion"]["best"]["model.weight_decay"] == 0.8


def test_a_record_whose_losses_are_another_score_is_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    # Records before 2026-12-07 chose on the whole held-out set (test documents included): not replayable today.
    suite_file, committed, _ = stopped_session(tmp_path, monkeypatch, capsys)
    document = json.loads(committed.read_text())
    assert document.pop("score") == search_ledger.SCORE
    committed.write_text(json.dumps(document))
    fits = StandInFits()
    assert sweep(monkeypatch, suite_file, tmp_path / "again", fits, "--search-record", str(committed)) == 2
    err = capsys.readouterr().err.strip()
    assert "its losses are the whole held-out set's loss" in err and "run without --search-record" in err
    assert len(err.splitlines()) == 1 and fits.started == []


def test_the_record_names_the_finished_runs_on_disk_that_its_path_left_behind(tmp_path, monkeypatch, capsys):
    # A runs directory kept across an amendment, its record set aside (as one of another score is): the new record
    # lists the old path's finished runs too, so a fresh clone given it reruns none of them.
    monkeypatch.setitem(search_runs_test.MINIMA, "lion", (5.0e-4, 0.8))
    runs, first = tmp_path / "runs", StandInFits()
    assert sweep(monkeypatch, write_suite(tmp_path / "first"), runs, first) == 0
    (runs / "tuned" / search_runs.RECORD).rename(tmp_path / "set-aside.json")
    (runs / "tuned" / "lion").rename(tmp_path / "lion-judged-at-the-old-best")  # as the amendment's note says
    amended = write_suite(tmp_path / "first", {**search_runs_test.SEARCH, "budget": 20, "max_extensions": 2})
    assert sweep(monkeypatch, amended, runs, StandInFits(stop_after=2)) != 0
    refreshed = runs / "tuned" / search_runs.RECORD
    tuning = lambda fits: {key for key in fits.started if key[3] >= 900}  # noqa: E731
    old_points = {(lr, wd) for variant, lr, wd, _ in tuning(first) if variant == "lion"}
    assert recorded(refreshed)["lion"] >= old_points, "every finished point on disk is in the record"

    fresh = StandInFits()
    assert sweep(monkeypatch, amended, tmp_path / "fresh", fresh, "--search-record", str(refreshed)) == 0
    assert len(tuning(fresh) & tuning(first)) == 2, "only the witness point (2 seeds) again"
