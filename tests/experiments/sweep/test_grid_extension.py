"""andrea sweep extends a grid itself, with a stand-in executor that "fits" in microseconds (each run's loss a
known function of its LR): a variant whose optimum is above its grid gains LRs above it until the optimum is
inside, one whose optimum is below gains LRs below, a bracketed one gains none; the ceiling stops it; the LRs
added are recorded, planned again by the next sweep (and its --dry-run) and not rerun; a cell with a failed
run is not extended."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import yaml
from andrea_testing import StandInExecutor

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.sweep.executors import write_start_marker
from andrea_lab.experiments.sweep.from_table import _choosing
from andrea_lab.experiments.sweep.grid_extension import (
    RECORD,
    GridExtension,
    capped_loss,
    next_lr,
    plan_lines,
    with_recorded,
)
from andrea_lab.experiments.sweep.plan import plan_sweep, suite_runs_dir
from andrea_lab.experiments.sweep.runner import Runner
from andrea_lab.experiments.sweep.speed_path import apply
from andrea_lab.experiments.sweep.suite import SuiteError, load_suite

#: Each variant's true optimum: above the suite's grid (1e-3..4e-3), below it, and inside it.
OPTIMA = {"rising": 1.6e-2, "falling": 5.0e-4, "bracketed": 2.0e-3}


def loss(variant: str, lr: float, seed: int) -> float:
    """A parabola in log2(LR) around the variant's optimum, offset by seed (the same for every variant)."""
    return 2.0 + 0.05 * math.log2(lr / OPTIMA[variant]) ** 2 + 0.001 * seed


class StandInFits(StandInExecutor):
    """An executor whose "fit" writes its summary at once: the loss of :func:`loss` (or fails, for
    ``failing``), so the runner and the extension see finished runs without training anything."""

    def __init__(self, failing=()):
        self.started: list[tuple[str, float, int]] = []
        self.failing = set(failing)

    def launch(self, run_dir, command, marker, slot):
        write_start_marker(run_dir, marker)
        key = (marker["variant"], marker["lr"], marker["seed"])
        self.started.append(key)
        if key in self.failing:
            return 3
        return self.finish(run_dir, loss(*key))


def write_suite(tmp_path: Path, max_extensions: int = 3, variants=tuple(OPTIMA)) -> Path:
    (tmp_path / "base.yaml").write_text("model: {}\n")
    document = {
        "name": "ext",
        "base": "base.yaml",
        "lrs": [1.0e-3, 2.0e-3, 4.0e-3],
        "seeds": [0, 1, 2],
        "variants": [{"name": name} for name in variants],
        "extend_grid": {"max_extensions": max_extensions, "factor": 2},
    }
    path = tmp_path / "ext.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def sweep(suite_file: Path, runs: Path, fits: StandInFits) -> tuple[list, str]:
    suite = load_suite(suite_file)
    specs = with_recorded(suite, runs, plan_sweep(suite, runs))
    out = io.StringIO()
    runner = Runner(specs, out=out, poll_s=0.0, executor=fits, extension=GridExtension(suite, runs))
    return runner.run(), out.getvalue()


def added_lrs(fits: StandInFits, variant: str) -> list[float]:
    return sorted({lr for name, lr, _ in fits.started if name == variant} - {1e-3, 2e-3, 4e-3})


def test_each_optimum_at_an_edge_is_extended_until_it_is_inside(tmp_path):
    fits = StandInFits()
    outcomes, out = sweep(write_suite(tmp_path), tmp_path / "runs", fits)
    assert added_lrs(fits, "rising") == [8e-3, 1.6e-2, 3.2e-2], "up to the optimum (1.6e-2) and one past it"
    assert added_lrs(fits, "falling") == [2.5e-4, 5e-4], "down past the optimum (5e-4)"
    assert added_lrs(fits, "bracketed") == []
    assert len(outcomes) == 27 + 5 * 3 and {o.state for o in outcomes} == {"finished"}
    assert "extend_grid: rising: best LR at the grid's highest (1e-3, 2e-3, 4e-3): adding 8e-3 (extension 1" in out
    assert "extend_grid: rising: optimum inside its grid (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)" in out
    assert "extend_grid: bracketed: optimum inside its grid (1e-3, 2e-3, 4e-3)" in out
    record = json.loads((tmp_path / "runs" / "ext" / RECORD).read_text())["extensions"]
    assert [(e["variant"], e["lr"], e["edge"], e["number"]) for e in record] == [
        ("rising", 8e-3, "highest", 1),
        ("falling", 5e-4, "lowest", 1),
        ("rising", 1.6e-2, "highest", 2),
        ("falling", 2.5e-4, "lowest", 2),
        ("rising", 3.2e-2, "highest", 3),
    ]


def test_the_ceiling_stops_it_and_says_the_optimum_was_not_found(tmp_path):
    fits = StandInFits()
    _, out = sweep(write_suite(tmp_path, max_extensions=1, variants=("rising",)), tmp_path / "runs", fits)
    assert added_lrs(fits, "rising") == [8e-3]
    assert "rising: optimum still at the grid's highest LR (1e-3, 2e-3, 4e-3, 8e-3) after 1 extension(s)" in out


def test_the_added_runs_are_the_suites_record_planned_again_and_not_rerun(tmp_path, capsys):
    suite_file, runs = write_suite(tmp_path, variants=("rising", "bracketed")), tmp_path / "runs"
    sweep(suite_file, runs, StandInFits())
    again = StandInFits()
    outcomes, out = sweep(suite_file, runs, again)
    assert again.started == [], "every run, the added ones too, was done before"
    assert len(outcomes) == 18 + 9 and {o.state for o in outcomes} == {"skipped"}
    assert "[27/27] rising lr=3.2e-2 seed=2 ... skipped" in out
    code = sweep_command.main([str(suite_file), "--runs-dir", str(runs), "--dry-run", "--no-check"])
    printed = capsys.readouterr().out
    assert code == 0 and "rising lr=1.6e-2 seed=0: skip (finished)" in printed
    assert "= 27 runs in" in printed, "the header counts the added runs"
    assert "up to 3 per (scale, variant): at most 18 more runs" in printed


def test_a_cell_with_a_failed_run_is_not_extended(tmp_path):
    fits = StandInFits(failing={("rising", 4e-3, 1)})
    outcomes, out = sweep(write_suite(tmp_path, variants=("rising",)), tmp_path / "runs", fits)
    assert added_lrs(fits, "rising") == [] and sum(o.failed for o in outcomes) == 1
    assert "extend_grid: rising: not every run ended, so its grid is not extended" in out
    assert not (suite_runs_dir(tmp_path / "runs", load_suite(tmp_path / "ext.yaml")) / RECORD).exists()


def test_the_plan_says_how_many_runs_it_may_add(tmp_path):
    suite = load_suite(write_suite(tmp_path))
    assert plan_lines(suite, plan_sweep(suite, tmp_path / "runs")) == [
        "extend_grid: a (scale, variant) whose best LR is at its grid's edge gets one more LR beyond it (x2 or /2), "
        "up to 3 per (scale, variant): at most 27 more runs"
    ]


@pytest.mark.parametrize(
    "losses, expected",
    [
        ({1e-3: {0: 2.2, 1: 2.3}, 2e-3: {0: 2.1, 1: 2.2}, 4e-3: {0: 2.0, 1: 2.1}}, (8e-3, "highest")),
        ({1e-3: {0: 2.0, 1: 2.1}, 2e-3: {0: 2.1, 1: 2.2}, 4e-3: {0: 2.2, 1: 2.3}}, (5e-4, "lowest")),
        ({1e-3: {0: 2.2, 1: 2.3}, 2e-3: {0: 2.0, 1: 2.1}, 4e-3: {0: 2.2, 1: 2.3}}, None),
    ],
)
def test_next_lr_follows_compares_rule(losses, expected):
    assert next_lr("v", losses, 2.0) == expected


@pytest.mark.parametrize(
    "entries, named",
    [
        (
            [
                {"scale": None, "variant": "rising", "lr": lr, "edge": "highest", "number": n}
                for n, lr in enumerate([8e-3 * 2**k for k in range(40)], 1)
            ],
            "40 LRs for rising; extend_grid adds at most 3",
        ),
        ([{"scale": None, "variant": "rising", "lr": -1.0, "edge": "highest", "number": 1}], "-1.0"),
        ([{"scale": None, "variant": "rising", "lr": "nan", "edge": "highest", "number": 1}], "nan"),
        ([{"scale": None, "variant": "rising", "lr": 8e-3, "edge": "sideways", "number": 1}], "sideways"),
    ],
)
def test_a_handed_record_cannot_plan_past_the_ceiling_or_add_a_bad_lr(tmp_path, entries, named):
    """The record lies in the runs directory, which a user can be handed: it may add no more LRs to a cell than
    the suite's own ceiling (a record of 170,000 LRs would otherwise plan past the suite's grid cap) and only
    learning rates the suite itself could hold."""
    suite_file = write_suite(tmp_path)
    record = suite_runs_dir(tmp_path / "runs", load_suite(suite_file)) / RECORD
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"schema": 1, "extensions": entries}))
    suite = load_suite(suite_file)
    with pytest.raises(SuiteError, match=f"{RECORD}: .*{named}"):
        with_recorded(suite, tmp_path / "runs", plan_sweep(suite, tmp_path / "runs"))


def test_an_added_lr_trains_on_its_cells_speed_path(tmp_path):
    """The sweep applies its speed rule to the runs it plans; the runs extend_grid adds later must train in the
    same arithmetic, or a cell's grid mixes bf16 and fp32 (as d128's and d256's first extensions of the ladder did)."""
    suite_file, runs = write_suite(tmp_path, max_extensions=1, variants=("rising", "bracketed")), tmp_path / "runs"
    suite = load_suite(suite_file)
    specs, _ = apply(plan_sweep(suite, runs), "bf16-compiled", lambda spec: None, bf16_units=True)
    commands: dict[tuple, tuple] = {}

    class Recording(StandInFits):
        def launch(self, run_dir, command, marker, slot):
            commands[(marker["variant"], marker["lr"])] = tuple(command)
            return super().launch(run_dir, command, marker, slot)

    Runner(specs, out=io.StringIO(), poll_s=0.0, executor=Recording(), extension=GridExtension(suite, runs)).run()
    added = commands[("rising", 8e-3)]
    for flag, value in (("--trainer.precision", "bf16-mixed"), ("--model.compile", "true")):
        assert added[added.index(flag) + 1] == value, f"{flag} of the added run: {added}"
    assert added.count("--trainer.precision") == 1
    assert "--model.config.cpu_attention_fp32" in added
    record = json.loads((runs / "ext" / "rising" / "lr8e-3-seed0" / "sweep-run.json").read_text())
    assert record["overrides"]["trainer.precision"] == "bf16-mixed"


def heldout_summary(run_dir: Path, whole: float, document: float | None, selection: float | None) -> None:
    """A finished run's summary.json whose held-out record has the scores given (None: a record from before it)."""
    heldout = {"loss": whole, "se": 0.01, "tokens": 1000, "documents": 26, "windows": 8, "split_tokens": 1000,
               "sampled": False, "se_unit": "document", "seed": 0, "document_loss": document}  # fmt: skip
    if selection is not None:
        heldout["parts"] = {"selection": {"loss": selection}, "test": {"loss": whole + 1.0}}
    summary = {"schema": 1, "status": "finished", "initial_val_loss": 5.0, "final_val_loss": 4.0, "heldout": heldout}
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary))


@pytest.mark.parametrize(
    "whole, document, selection, chosen",
    [(3.0, 3.2, 3.4, 3.4), (3.0, 3.2, None, 3.2), (3.0, None, None, 3.0), (6.0, None, 5.5, 5.0)],
)
def test_choices_are_made_on_the_held_out_selection_part_as_compare_makes_them(
    tmp_path, whole, document, selection, chosen
):
    # The test part judges; a choice made on the whole held-out set (as until 2026-12-07) saw the test documents.
    heldout_summary(tmp_path / "run", whole, document, selection)
    assert capped_loss(tmp_path / "run") == chosen  # capped at the loss at init (5.0)
    row = {"heldout_selection_loss": selection, "heldout_document_loss": document}
    assert min(_choosing(row, (5.0, 4.0, whole)), 5.0) == chosen, "a committed table's row chooses alike"
    assert _choosing(row, (5.0, 4.0, None)) == 4.0, "a run without the held-out evaluation: its last loss"
