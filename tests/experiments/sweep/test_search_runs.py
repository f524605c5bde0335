"""andrea sweep runs a suite's search: with a stand-in executor whose "fit" writes a known loss at once (a bowl
in log2 of the LR and of the weight decay around each variant's own minimum): the descent walks one key at a
time to each bowl's minimum, the best point is then run at the judged seeds in the suite's directory while the
tuning runs stay beside it, every run's record names its step, and a sweep stopped half-way resumes along the
same path without rerunning a finished point."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from andrea_testing import StandInExecutor

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.sweep import search_runs
from andrea_lab.experiments.sweep.executors import write_start_marker
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import load_suite

#: Each variant's minimum (LR, weight decay): inside the grids, and apart, so each search has its own path.
MINIMA = {"adamw": (2.0e-3, 0.05), "lion": (5.0e-4, 0.2)}
SEARCH = {
    "keys": {"model.lr": [2.5e-4, 5.0e-4, 1.0e-3, 2.0e-3, 4.0e-3], "model.weight_decay": [0.025, 0.05, 0.1, 0.2, 0.4]},
    "base": {"model.lr": 1.0e-3, "model.weight_decay": 0.1},
    "budget": 14,
    "tuning_seeds": [900, 901],
}


def loss(variant: str, lr: float, weight_decay: float, seed: int) -> float:
    best_lr, best_wd = MINIMA[variant]
    return 3.0 + 0.05 * math.log2(lr / best_lr) ** 2 + 0.02 * math.log2(weight_decay / best_wd) ** 2 + 1e-4 * seed


class StandInFits(StandInExecutor):
    """Fits in microseconds: each writes its summary with :func:`loss` of the point its marker records; after
    ``stop_after`` launches every further fit fails (a sweep killed half-way: no summary written)."""

    def __init__(self, stop_after: int | None = None):
        self.started: list[tuple] = []
        self.stop_after = stop_after

    def launch(self, run_dir, command, marker, slot):
        write_start_marker(run_dir, marker)
        key = (marker["variant"], marker["lr"], marker["overrides"]["model.weight_decay"], marker["seed"])
        if self.stop_after is not None and len(self.started) >= self.stop_after:
            return 3
        self.started.append(key)
        return self.finish(run_dir, loss(*key))


def write_suite(tmp_path: Path, search=None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "base.yaml").write_text("model: {}\n")
    document = {
        "name": "tuned",
        "base": "base.yaml",
        "lrs": [1.0e-3],
        "seeds": [100, 101, 102],
        "search": search or SEARCH,
        "variants": [{"name": name} for name in MINIMA],
    }
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def sweep(monkeypatch, suite_file: Path, runs: Path, fits: StandInFits, *extra: str) -> int:
    monkeypatch.setattr(sweep_command, "make_executor", lambda *args, **kwargs: fits)
    return sweep_command.main([str(suite_file), "--runs-dir", str(runs), "--no-check", "--speed", "config", *extra])


def record(runs: Path) -> dict:
    entries = json.loads((runs / "tuned" / search_runs.RECORD).read_text())["searches"]
    return {entry["variant"]: entry for entry in entries}


def test_each_variant_descends_to_its_own_minimum_then_runs_the_judged_seeds(tmp_path, monkeypatch, capsys):
    runs, fits = tmp_path / "runs", StandInFits()
    assert sweep(monkeypatch, write_suite(tmp_path), runs, fits) == 0
    found = record(runs)
    for variant, (lr, weight_decay) in MINIMA.items():
        assert found[variant]["best"] == {"model.lr": lr, "model.weight_decay": weight_decay}
        assert found[variant]["reason"] == "no key improves" and found[variant]["budget"] == 14
        tuning = {(k[1], k[2]) for k in fits.started if k[0] == variant and k[3] >= 900}
        assert found[variant]["spent"] == len(tuning) < 25, "coordinate descent, not the full grid"
        judged = [k for k in fits.started if k[0] == variant and k[3] < 900]
        assert judged == [(variant, lr, weight_decay, seed) for seed in (100, 101, 102)]
    assert found["adamw"]["path"][0]["step"] == "search round 1, model.lr"
    judged_dirs = sorted(p.parent.parent.name for p in (runs / "tuned").rglob("summary.json"))
    assert set(judged_dirs) == {"adamw", "lion"} and len(judged_dirs) == 6, "no tuning seed in the suite's directory"
    marker = json.loads(
        (runs / "tuned@tuning" / "adamw" / "lr0.001-weight_decay0.1-seed900" / "sweep-run.json").read_text()
    )
    assert marker["search_step"] == "search round 1, model.lr"
    judged_marker = json.loads((runs / "tuned" / "adamw" / "lr2e-3-seed100" / "sweep-run.json").read_text())
    assert (
        judged_marker["search_step"] == search_runs.JUDGED and judged_marker["overrides"]["model.weight_decay"] == 0.05
    )
    out = capsys.readouterr().out
    assert "search: coordinate descent in 2 (scale, variant) cells, a budget of 14 points" in out
    assert "(search round 1, model.weight_decay)" in out


def test_a_search_stopped_half_way_resumes_along_the_same_path(tmp_path, monkeypatch, capsys):
    whole = StandInFits()
    assert sweep(monkeypatch, write_suite(tmp_path / "a"), tmp_path / "a" / "runs", whole) == 0
    suite_file, runs = write_suite(tmp_path / "b"), tmp_path / "b" / "runs"
    killed = StandInFits(stop_after=7)
    assert sweep(monkeypatch, suite_file, runs, killed) == sweep_command.EXIT_FAILED_RUNS
    assert "its search stops here for this sweep" in capsys.readouterr().out
    resumed = StandInFits()
    assert sweep(monkeypatch, suite_file, runs, resumed) == 0
    assert killed.started + resumed.started == whole.started, "the same runs in the same order, none twice"
    assert record(runs) == record(tmp_path / "a" / "runs")
    again = StandInFits()
    assert sweep(monkeypatch, suite_file, runs, again) == 0 and again.started == [], "a finished search reruns nothing"


def test_a_dry_run_without_the_tuning_runs_leaves_a_finished_record_as_it_was(tmp_path, monkeypatch):
    """The tuning runs gone (another session, or moved away) and no --search-record: the replay knows only its
    first step. Its dry run wrote that over the finished record (optimizers_tuned's, 2026-12-07, which compare
    then copied beside the committed table); a record never goes back to fewer points than it spent."""
    import shutil

    suite_file, runs = write_suite(tmp_path), tmp_path / "runs"
    assert sweep(monkeypatch, suite_file, runs, StandInFits()) == 0
    finished = (runs / "tuned" / search_runs.RECORD).read_text()
    shutil.rmtree(runs / "tuned@tuning")
    assert sweep(monkeypatch, suite_file, runs, StandInFits(), "--dry-run") == 0
    assert (runs / "tuned" / search_runs.RECORD).read_text() == finished
    rerun = StandInFits()  # a real sweep reruns the gone points, to the same losses and the same record
    assert sweep(monkeypatch, suite_file, runs, rerun) == 0 and rerun.started
    assert record(runs) == {entry["variant"]: entry for entry in json.loads(finished)["searches"]}
    assert all(k[3] >= 900 for k in rerun.started), "the judged runs are still there"


def test_the_dry_run_lists_the_first_step_and_the_most_runs_it_may_add(tmp_path, monkeypatch, capsys):
    assert sweep(monkeypatch, write_suite(tmp_path), tmp_path / "runs", StandInFits(), "--dry-run") == 0
    out = capsys.readouterr().out
    assert "at most 62 runs in all" in out  # 2 variants x (14 points x 2 tuning seeds + 3 judged seeds)
    assert "adamw lr=2.5e-4 seed=900 (search round 1, model.lr): run" in out
    assert not (tmp_path / "runs" / "tuned@tuning").exists()
    assert "beyond it" not in out
    bounded = {**SEARCH, "max_extensions": 2, "upper_bounds": {"model.weight_decay": 1.0}}
    assert sweep(monkeypatch, write_suite(tmp_path, bounded), tmp_path / "runs", StandInFits(), "--dry-run") == 0
    said = "a best value at an edge gains up to 2 values beyond it per key (factor 2; in the distance to the bound "
    assert said + "for model.weight_decay < 1): at most 62 runs" in capsys.readouterr().out


@pytest.mark.parametrize(
    "search, message",
    [
        ({**SEARCH, "budget": 1}, "budget 1 is not a whole number of points >= 2"),
        ({**SEARCH, "keys": {}}, "empty search space"),
        ({**SEARCH, "tuning_seeds": [100]}, "both tuning and judged seeds"),
    ],
)
def test_bad_search_declarations_are_one_line_and_exit_2_before_any_run(tmp_path, monkeypatch, capsys, search, message):
    fits = StandInFits()
    assert sweep(monkeypatch, write_suite(tmp_path, search), tmp_path / "runs", fits) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and fits.started == []


def test_compare_prints_each_budget_and_refuses_unequal_ones_unless_the_suite_says_so(tmp_path, monkeypatch, capsys):
    from andrea_lab.commands import compare as compare_command  # pandas and scipy: this test only

    suite_file, runs = write_suite(tmp_path), tmp_path / "runs"
    document = yaml.safe_load(suite_file.read_text())
    document["variants"][1]["search"] = {"budget": 10}  # lion's own, smaller budget
    suite_file.write_text(yaml.safe_dump(document, sort_keys=False))
    assert sweep(monkeypatch, suite_file, runs, StandInFits()) == 0
    capsys.readouterr()
    assert compare_command.main([str(runs / "tuned"), "--out", str(tmp_path / "cmp")]) == 2
    captured = capsys.readouterr()
    assert "tuning budget: adamw: 14 points" in captured.out and "tuning budget: lion: 10 points" in captured.out
    assert "different budgets (points: adamw 14, lion 10)" in captured.err and len(captured.err.splitlines()) == 1
    document["unequal_budgets_ok"] = True
    suite_file.write_text(yaml.safe_dump(document, sort_keys=False))
    assert compare_command.main([str(runs / "tuned"), "--out", str(tmp_path / "cmp")]) == 0


def test_whole_tuned_values_reach_the_fit_as_whole_numbers(tmp_path):
    search = {**SEARCH, "keys": {**SEARCH["keys"], "model.warmup_steps": [20, 40]}}
    search["base"] = {**SEARCH["base"], "model.warmup_steps": 40}
    suite = load_suite(write_suite(tmp_path, search))
    first = search_runs.SearchRuns(suite, tmp_path / "r", plan_sweep(suite, tmp_path / "r")).initial([])
    command = list(first[0].command)
    assert command[command.index("--model.warmup_steps") + 1] == "40"  # an int key refuses "40.0"
    assert command[command.index("--model.weight_decay") + 1] == "0.1"


def test_a_tuned_key_the_fit_does_not_have_is_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    search = {**SEARCH, "keys": {"model.no_such_key": [1.0, 2.0]}, "base": {"model.no_such_key": 1.0}}
    suite_file = write_suite(tmp_path, search)
    document = yaml.safe_load(suite_file.read_text())
    document["variants"] = document["variants"][:1]
    suite_file.write_text(yaml.safe_dump(document, sort_keys=False))
    fits = StandInFits()
    monkeypatch.setattr(sweep_command, "make_executor", lambda *args, **kwargs: fits)
    assert sweep_command.main([str(suite_file), "--runs-dir", str(tmp_path / "r"), "--speed", "config"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no_such_key" in err and len(err.splitlines()) == 1 and fits.started == []


def test_a_claim_on_a_tuned_value_at_an_edge_is_not_judged(tmp_path, monkeypatch, capsys):
    from andrea_lab.commands import compare as compare_command  # pandas and scipy: this test only

    suite_file, runs = write_suite(tmp_path), tmp_path / "runs"
    document = yaml.safe_load(suite_file.read_text())
    document["claims"] = [{"lower_loss": ["lion", "adamw"], "text": "lion lower"}]
    suite_file.write_text(yaml.safe_dump(document, sort_keys=False))
    monkeypatch.setitem(MINIMA, "lion", (5.0e-4, 0.8))  # above the weight decays tried (0.025..0.4)
    assert sweep(monkeypatch, suite_file, runs, StandInFits()) == 0
    capsys.readouterr()
    assert compare_command.main([str(runs / "tuned"), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    edge = "model.weight_decay 0.4 at the highest of its values (0.025..0.4): extend above"
    assert f"optimum not found: lion: {edge}" in out
    assert f"not judged: lion's optimum not found: {edge}" in (tmp_path / "cmp" / "comparison.md").read_text()


def test_runs_made_with_other_settings_are_neither_counted_nor_overwritten(tmp_path, monkeypatch, capsys):
    suite_file, runs = write_suite(tmp_path), tmp_path / "runs"
    assert sweep(monkeypatch, suite_file, runs, StandInFits()) == 0
    document = yaml.safe_load(suite_file.read_text())
    document["common"] = {"trainer.max_steps": 5}  # the suite edited since its runs
    suite_file.write_text(yaml.safe_dump(document, sort_keys=False))
    capsys.readouterr()
    fits = StandInFits()
    assert sweep(monkeypatch, suite_file, runs, fits) == 2 and fits.started == []
    err = capsys.readouterr().err.strip()
    assert "holds a run made with other settings (--trainer.max_steps (unset) -> 5)" in err
    assert len(err.splitlines()) == 1


def test_lrs_and_seeds_on_the_command_line_are_refused_for_a_search(tmp_path, monkeypatch, capsys):
    fits = StandInFits()
    assert sweep(monkeypatch, write_suite(tmp_path), tmp_path / "runs", fits, "--seeds", "1,2") == 2
    assert "--lrs and --seeds do not apply to a suite with search:" in capsys.readouterr().err
    assert fits.started == []


def test_with_max_extensions_an_edge_optimum_is_followed_beyond_the_values(tmp_path, monkeypatch):
    monkeypatch.setitem(MINIMA, "lion", (5.0e-4, 0.8))  # above the weight decays declared (0.025..0.4)
    runs = tmp_path / "runs"
    assert sweep(monkeypatch, write_suite(tmp_path, {**SEARCH, "max_extensions": 2}), runs, StandInFits()) == 0
    lion = record(runs)["lion"]
    assert lion["best"]["model.weight_decay"] == 0.8 and lion["values"]["model.weight_decay"][-1] == 1.6
    assert lion["spent"] <= lion["budget"]


def test_a_search_record_that_is_not_one_is_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "runs" / "tuned").mkdir(parents=True)
    (tmp_path / "runs" / "tuned" / search_runs.RECORD).write_text('{"searches": 3}')
    fits = StandInFits()
    assert sweep(monkeypatch, write_suite(tmp_path), tmp_path / "runs", fits) == 2 and fits.started == []
    err = capsys.readouterr().err.strip()
    assert "not a search record" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_real_fits_search_then_judge_and_compare_reads_the_budget(tmp_path, text_corpus, capsys):
    """Four tiny real fits (about 30 s): the descent's three points at the tuning seed, then the judged seed."""
    from andrea_lab.commands import compare as compare_command
    from andrea_lab.experiments.sweep.tiny_suite import MICRO

    document = {
        "name": "tuned",
        "base": str(Path(__file__).resolve().parents[3] / "experiments" / "cpu-base.yaml"),
        "common": {**MICRO, "data.corpus": str(text_corpus)},
        "lrs": [1.0e-3],
        "seeds": [7100],
        "search": {
            "keys": {"model.lr": [1.0e-3, 4.0e-3], "model.warmup_steps": [1, 2]},
            "base": {"model.lr": 1.0e-3, "model.warmup_steps": 2},
            "budget": 3,
            "tuning_seeds": [7190],
        },
        "variants": [{"name": "adamw"}],
    }
    suite_file, runs = tmp_path / "tuned.yaml", tmp_path / "runs"
    suite_file.write_text(yaml.safe_dump(document, sort_keys=False))
    assert sweep_command.main([str(suite_file), "--runs-dir", str(runs), "-j", "1"]) == 0
    entry = record(runs)["adamw"]
    assert entry["spent"] == 3 and len(list((runs / "tuned@tuning" / "adamw").glob("*/summary.json"))) == 3
    judged = runs / "tuned" / "adamw" / f"lr{'4e-3' if entry['best']['model.lr'] == 4e-3 else '1e-3'}-seed7100"
    assert (judged / "summary.json").is_file()
    capsys.readouterr()
    assert compare_command.main([str(runs / "tuned"), "--out", str(tmp_path / "cmp")]) == 0
    assert "tuning budget: adamw: 3 points, 3 spent" in capsys.readouterr().out
