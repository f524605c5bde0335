"""Bounded work from handed files (issue 59): a tiny file may not cost gigabytes or minutes. A run's config.yaml
goes through the bounded YAML reader, a handed runs.csv is read only as a regular file of bounded size, and a
suite's grid has a printed cap. Each test fails on the code before the fix (it returned the bomb's expansion,
waited on the FIFO, or planned the grid)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from andrea_testing import within

from andrea_lab.cli import main as cli_main
from andrea_lab.experiments.compare.config_variants import run_config
from andrea_lab.experiments.compare.runs_table import MAX_RUNS_CSV_BYTES, read_runs_csv
from andrea_lab.experiments.sweep.suite import MAX_RUNS, SuiteError, load_suite
from andrea_lab.files import HandedFileError
from andrea_lab.runs.directory import RunRecord, _as_yaml

REPO = Path(__file__).resolve().parents[1]


def mapping_bomb(levels: int, width: int) -> str:
    """A config.yaml of a few hundred bytes whose ``model`` flattens to ``width ** levels`` keys."""
    lines = [f"a0: &a0 {{{', '.join(f'k{j}: 1' for j in range(width))}}}"]
    lines += [f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(width))}}}" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\nmodel: *a{levels}\n"


def test_a_runs_config_alias_bomb_is_no_config(tmp_path):
    """`andrea compare` names ad-hoc variants from each run's config.yaml; a 10**6-key bomb (before: flattened
    into a million-entry dict; the issue's 342-byte one cost 3.45 GB) is read as no config, from the record."""
    run = tmp_path / "runs" / "x" / "version_0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(mapping_bomb(6, 10))
    assert len((run / "config.yaml").read_bytes()) < 1000
    record = RunRecord(status="finished", config={"d_model": 32}, training={"lr": 1e-3})
    with within(20):
        config = run_config(run, record)
    assert config == {"model.config.d_model": 32, "model.lr": 1e-3}


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "too-large"])
def test_a_handed_runs_table_that_is_no_regular_file_or_too_large_is_refused(kind, tmp_path):
    table = tmp_path / "runs.csv"
    if kind == "fifo":
        os.mkfifo(table)
    elif kind == "dev-zero-link":
        table.symlink_to("/dev/zero")
    else:
        with open(table, "wb") as handle:  # sparse: no disk used
            handle.truncate(MAX_RUNS_CSV_BYTES + 1)
    with within(20), pytest.raises(HandedFileError, match="runs table"):
        read_runs_csv(table)


def test_compare_project_with_a_fifo_as_a_suites_table_is_one_line(tmp_path, capsys):
    results, suites = tmp_path / "results", tmp_path / "suites"
    (results / "aa").mkdir(parents=True)
    os.mkfifo(results / "aa" / "runs.csv")
    suites.mkdir()
    (suites / "aa.yaml").write_text((REPO / "experiments" / "suites" / "aa.yaml").read_text())
    (suites / "base.yaml").write_text("model: {}\n")
    text = (suites / "aa.yaml").read_text()
    (suites / "aa.yaml").write_text(text.replace(yaml.safe_load(text)["base"], "base.yaml"))
    with within(20):
        code = cli_main(["compare", str(results), "--project", "--suites", str(suites)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "not a regular file" in err and "Traceback" not in err


def grid_suite(tmp_path: Path, lrs: int, seeds: int, variants: int = 1) -> Path:
    (tmp_path / "base.yaml").write_text("model: {}\n")
    suite = {
        "base": "base.yaml",
        "lrs": [float(f"{1 + i}e-4") for i in range(lrs)],
        "seeds": list(range(seeds)),
        "variants": [{"name": f"v{i}"} for i in range(variants)],
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_a_suite_grid_past_the_cap_is_refused_naming_the_count_and_the_cap(tmp_path):
    with within(20), pytest.raises(SuiteError, match=r"the grid is 10,100 runs .* more than the 10,000"):
        load_suite(grid_suite(tmp_path, lrs=101, seeds=50, variants=2))
    assert MAX_RUNS == 10_000
    assert len(load_suite(grid_suite(tmp_path, lrs=100, seeds=50, variants=2)).seeds) == 50  # at the cap


def test_sweep_dry_run_of_a_huge_grid_is_refused_at_once(tmp_path, capsys):
    """The issue's 0.68 MB suite of 30,000 LRs and 30,000 seeds ran `sweep --dry-run` for minutes."""
    suite = grid_suite(tmp_path, lrs=3000, seeds=3000)
    with within(30):
        code = cli_main(["sweep", str(suite), "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "9,000,000 runs" in lines[0] and "10,000" in lines[0], err


def test_a_recorded_command_value_is_read_within_bounds():
    """settings_difference reads each option's value as YAML: an alias bomb stays text."""
    bomb = "&a [x, x, x, x, x, x, x, x, x, x]"
    nested = "[" + ", ".join(["*a"] * 10) + "]"
    value = "{a: " + bomb + ", b: &b " + nested + ", c: &c [" + ", ".join(["*b"] * 10) + "]"
    value += ", d: &d [" + ", ".join(["*c"] * 10) + "], e: &e [" + ", ".join(["*d"] * 10) + "]"
    value += ", f: [" + ", ".join(["*e"] * 10) + "]}"
    assert isinstance(_as_yaml(value), str)
    assert _as_yaml("[1, 2]") == [1, 2]
