"""compare's view of a suite's search: each variant's budget beside how it was tuned (printed, and a section of
comparison.md), a refusal in one line to rank variants of unequal budgets unless the suite says unequal_budgets_ok,
and a tuned value at the edge of its values named as an optimum not found."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from andrea_lab.commands import compare as compare_command
from andrea_lab.experiments.compare import report, search_budgets
from andrea_lab.experiments.sweep.suite import run_version
from andrea_lab.runs.directory import DONE_MARKER, START_MARKER, HeldOut, RunRecord
from andrea_lab.runs.directory import write_record as write_run_record


def entry(variant: str, budget: int = 8, best_wd: float = 0.1, scale=None) -> dict:
    return {
        "scale": scale,
        "variant": variant,
        "budget": budget,
        "spent": budget - 2,
        "reason": "no key improves",
        "best": {"model.lr": 2e-3, "model.weight_decay": best_wd},
        "values": {"model.lr": [1e-3, 2e-3, 4e-3], "model.weight_decay": [0.05, 0.1, 0.2]},
        "path": [],
    }


def runs(*variants: str, lrs=(2e-3,)) -> pd.DataFrame:
    return pd.DataFrame(
        [{"variant": v, "lr": lr, "seed": seed} for v in variants for lr in lrs for seed in (100, 101, 102)]
    )


def write_record(directory: Path, entries) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / search_budgets.RECORD).write_text(json.dumps({"schema": 1, "searches": entries}))
    return directory


def test_equal_budgets_are_reported_and_ranked():
    table = search_budgets.budgets([entry("adamw"), entry("lion")], runs("adamw", "lion"))
    assert list(table["budget"]) == [8, 8] and search_budgets.refusal(table, unequal_ok=False) is None
    assert "tuning budget: adamw: 8 points, 6 spent; search (no key improves): model.lr 0.002" in "\n".join(
        search_budgets.lines(table)
    )


def test_unequal_budgets_are_refused_in_one_line_unless_the_suite_says_so():
    table = search_budgets.budgets([entry("adamw", 8), entry("lion", 6)], runs("adamw", "lion"))
    message = search_budgets.refusal(table, unequal_ok=False)
    assert "different budgets (points: adamw 8, lion 6)" in message and "unequal_budgets_ok: true" in message
    assert "\n" not in message
    assert search_budgets.refusal(table, unequal_ok=True) is None


def test_a_grid_variant_counts_its_lrs_as_its_budget():
    frame = pd.concat([runs("adamw"), runs("pre", lrs=(1e-3, 2e-3, 4e-3, 8e-3))], ignore_index=True)
    table = search_budgets.budgets([entry("adamw", 3)], frame)
    assert dict(zip(table["variant"], table["budget"])) == {"adamw": 3, "pre": 4}
    assert "pre 4" in search_budgets.refusal(table, unequal_ok=False)


def test_budgets_are_compared_within_each_scale():
    entries = [
        entry("adamw", 8, scale="d64"),
        entry("lion", 8, scale="d64"),
        entry("adamw", 8, scale="d96"),
        entry("lion", 6, scale="d96"),
    ]
    frame = pd.concat([runs("adamw", "lion").assign(scale=s) for s in ("d64", "d96")], ignore_index=True)
    message = search_budgets.refusal(search_budgets.budgets(entries, frame), unequal_ok=False)
    assert message.startswith("the variants at d96 were tuned with different budgets (points: adamw 8, lion 6)")


@pytest.mark.parametrize(
    "best_wd, expected",
    [
        (0.2, "model.weight_decay 0.2 at the highest of its values (0.05..0.2): extend above"),
        (0.05, "model.weight_decay 0.05 at the lowest of its values (0.05..0.2): extend below"),
        (0.1, ""),
    ],
)
def test_a_tuned_value_at_an_edge_is_an_optimum_not_found(best_wd, expected):
    table = search_budgets.budgets([entry("lion", best_wd=best_wd)], runs("lion"))
    assert table.loc[0, "optimum_not_found"] == expected
    assert any(line.startswith("optimum not found: lion: ") for line in search_budgets.lines(table)) == bool(expected)


def test_compare_exits_2_on_unequal_budgets_and_prints_each_budget(tmp_path, capsys):
    directory = write_record(tmp_path / "tuned", [entry("adamw", 8), entry("lion", 6)])
    _, table, status = compare_command.search_budget_check(directory, runs("adamw", "lion"), None)
    captured = capsys.readouterr()
    assert status == 2 and len(captured.err.strip().splitlines()) == 1
    assert "tuning budget: lion: 6 points, 4 spent" in captured.out and list(table["budget"]) == [8, 6]
    said_so = SimpleNamespace(unequal_budgets_ok=True)  # the suite's override
    assert compare_command.search_budget_check(directory, runs("adamw", "lion"), said_so)[-1] is None


def test_a_handed_record_that_is_not_one_is_one_line(tmp_path, capsys):
    directory = tmp_path / "tuned"
    directory.mkdir()
    (directory / search_budgets.RECORD).write_text(json.dumps({"schema": 1, "searches": [{"variant": "x"}]}))
    assert compare_command.search_budget_check(directory, runs("x"), None)[-1] == 2
    assert "not a search record" in capsys.readouterr().err


def write_suite_dir(root: Path, variants=("adamw", "lion"), scales=(None,)) -> Path:
    """A suite's run directories as ``andrea sweep`` leaves them (start marker, done marker, summary.json with a
    held-out loss), 3 seeds of each variant at one LR, at each scale: the runs a search's judged seeds leave."""
    for scale in scales:
        for index, variant in enumerate(variants):
            for seed in (100, 101, 102):
                run_dir = root / (scale or "") / variant / run_version(2e-3, seed)
                run_dir.mkdir(parents=True)
                start = {"suite": root.name, "variant": variant, "lr": 2e-3, "seed": seed, "variant_index": index}
                if scale is not None:
                    start.update(scale=scale, scale_index=scales.index(scale))
                (run_dir / START_MARKER).write_text(json.dumps(start))
                (run_dir / DONE_MARKER).write_text(json.dumps({"status": "finished"}))
                loss = 3.0 - 0.1 * index + seed / 1000
                heldout = HeldOut(loss, 0.05, 4096, 12, 64, 100_000, True, "documents", 0)
                record = RunRecord("finished", final_val_loss=loss + 0.1, lr=2e-3, seed=seed, heldout=heldout)
                write_run_record(run_dir, record)
    return root


def budget_section(markdown: str) -> str:
    """The report's tuning budget section, up to the next section ('' without one)."""
    _, found, rest = markdown.partition("## Tuning budgets\n")
    return found + rest.split("\n## ")[0] if found else ""


def test_comparison_md_carries_each_variants_budget_beside_how_it_was_tuned(tmp_path, capsys):
    suite = write_suite_dir(tmp_path / "tuned")
    write_record(suite, [entry("adamw"), entry("lion", best_wd=0.2)])
    out = tmp_path / "cmp"
    assert compare_command.main([str(suite), "--out", str(out), "--no-tensorboard"]) == 0
    section = budget_section((out / "comparison.md").read_text(encoding="utf-8"))
    header, _, *rows = [line for line in section.splitlines() if line.startswith("|")]
    assert header == (
        "| variant | tuned by | budget (points) | spent | stopped because | best point | optimum not found (extend) |"
    )  # no scale column: the suite has none
    assert rows == [
        "| adamw | search | 8 | 6 | no key improves | model.lr 0.002, model.weight_decay 0.1 |  |",
        "| lion | search | 8 | 6 | no key improves | model.lr 0.002, model.weight_decay 0.2 | "
        "model.weight_decay 0.2 at the highest of its values (0.05..0.2): extend above |",
    ]
    assert "search.json" in section
    assert "tuning budget: lion: 8 points, 6 spent" in capsys.readouterr().out  # printed as before


def test_a_suite_without_a_search_record_has_no_budget_section(tmp_path):
    suite = write_suite_dir(tmp_path / "grid")
    out = tmp_path / "cmp"
    assert compare_command.main([str(suite), "--out", str(out), "--no-tensorboard"]) == 0
    markdown = (out / "comparison.md").read_text(encoding="utf-8")
    assert markdown.startswith("# Comparison: grid")
    assert budget_section(markdown) == "" and "Tuning budgets" not in markdown


def test_a_suite_with_scales_gets_the_budgets_of_every_scale_in_its_top_report(tmp_path):
    suite = write_suite_dir(tmp_path / "tuned", scales=("d64", "d96"))
    entries = [
        entry(v, scale=s, best_wd=0.05 if (v, s) == ("lion", "d96") else 0.1)
        for s in ("d64", "d96")
        for v in ("adamw", "lion")
    ]
    write_record(suite, entries)
    out = tmp_path / "cmp"
    assert compare_command.main([str(suite), "--out", str(out), "--no-tensorboard"]) == 0
    section = budget_section((out / "comparison.md").read_text(encoding="utf-8"))
    header, _, *rows = [line for line in section.splitlines() if line.startswith("|")]
    assert header.startswith("| variant | scale | tuned by | budget (points) |")
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| adamw", "d64"],
        ["| lion", "d64"],
        ["| adamw", "d96"],
        ["| lion", "d96"],
    ]
    assert rows[-1].endswith("model.weight_decay 0.05 at the lowest of its values (0.05..0.2): extend below |")


def test_a_variant_tuned_over_the_lr_grid_is_a_row_with_its_lrs_as_its_budget():
    frame = pd.concat([runs("adamw"), runs("pre", lrs=(1e-3, 2e-3, 4e-3))], ignore_index=True)
    table = search_budgets.budgets([entry("adamw", 3)], frame)
    rows = [line for line in "\n".join(report.budget_lines(table)).splitlines() if line.startswith("| pre")]
    assert rows == ["| pre | LR grid | 3 | 3 |  |  |  |"]


def test_the_record_goes_beside_the_table_and_a_comparison_of_the_table_keeps_its_edges(tmp_path, capsys):
    """The tuned values are not columns of runs.csv: without the record beside it, a comparison of the committed
    table (``andrea compare runs.csv``, the project's) would judge a claim on an optimum its search never found."""
    suite = write_suite_dir(tmp_path / "tuned")
    write_record(suite, [entry("adamw"), entry("lion", best_wd=0.2)])
    out = tmp_path / "cmp"
    assert compare_command.main([str(suite), "--out", str(out), "--no-tensorboard"]) == 0
    kept, recorded = out / search_budgets.RECORD, suite / search_budgets.RECORD
    assert json.loads(kept.read_text()) == json.loads(recorded.read_text())
    capsys.readouterr()
    again = tmp_path / "again"
    assert compare_command.main([str(out / "runs.csv"), "--out", str(again), "--no-tensorboard"]) == 0
    assert "optimum not found: lion: model.weight_decay 0.2 at the highest" in capsys.readouterr().out
    assert "extend above" in budget_section((again / "comparison.md").read_text(encoding="utf-8"))


def test_a_grid_suites_table_gets_no_record(tmp_path):
    out = tmp_path / "cmp"
    assert compare_command.main([str(write_suite_dir(tmp_path / "grid")), "--out", str(out), "--no-tensorboard"]) == 0
    assert (out / "runs.csv").is_file() and not (out / search_budgets.RECORD).exists()


def test_the_project_judges_no_claim_on_a_committed_tables_tuned_value_at_an_edge(tmp_path):
    from andrea_lab.experiments.compare import optimum_edges, project

    suite = write_suite_dir(tmp_path / "tuned")
    write_record(suite, [entry("adamw"), entry("lion", best_wd=0.2)])
    results, suites = tmp_path / "results", tmp_path / "suites"
    assert compare_command.main([str(suite), "--out", str(results / "tuned"), "--no-tensorboard"]) == 0
    suites.mkdir()
    base = Path(__file__).resolve().parents[3] / "experiments" / "cpu-base.yaml"
    (suites / "tuned.yaml").write_text(
        f"base: {base}\nlrs: [2.0e-3]\nseeds: [100, 101, 102]\n"
        "variants:\n  - name: adamw\n  - name: lion\n    overrides: {model.optimizer: andrea-lab:lion}\n"
        "reference: adamw\nclaims:\n  - lower_loss: [lion, adamw]\n    text: Lion reaches a lower loss\n"
    )
    table = project.project_table(compare_command.committed_suites(results, suites))
    (outcome,) = table["outcome"]
    assert optimum_edges.is_not_judged(outcome) and "model.weight_decay 0.2 at the highest" in outcome
    (results / "tuned" / search_budgets.RECORD).unlink()  # without it, the same table is judged
    (judged,) = project.project_table(compare_command.committed_suites(results, suites))["outcome"]
    assert not optimum_edges.is_not_judged(judged)
