"""`andrea sweep` end to end on a micro config: two variants x two learning rates x one seed, killed after
the first run (SIGKILL to its process group), resumed (finished runs skipped, the interrupted one moved
aside and redone), then `andrea compare` on the result. Plus the preflight check of every variant."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from andrea_lab.runs.directory import DONE_MARKER, START_MARKER

REPO = Path(__file__).resolve().parents[2]
ANDREA = [sys.executable, "-m", "andrea_lab.cli"]

#: MICRO_OVERRIDES (tests/conftest.py) as a suite's common overrides, on top of experiments/cpu-base.yaml.
MICRO_COMMON = {
    "model.config.d_model": 32,
    "model.config.n_layer": 2,
    "model.config.n_head": 2,
    "data.batch_size": 8,
    "data.max_val_batches": 2,
    "trainer.limit_val_batches": 2,
    "trainer.num_sanity_val_steps": 2,
    "trainer.max_steps": 10,
    "trainer.val_check_interval": 5,
    "trainer.log_every_n_steps": 1,
    "model.warmup_steps": 2,
}


def write_suite(directory: Path, corpus: Path) -> Path:
    path = directory / "micro.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "micro",
                "base": str(REPO / "experiments" / "cpu-base.yaml"),
                "common": {**MICRO_COMMON, "data.corpus": str(corpus)},
                "lrs": [1.0e-3, 1.0e-2],
                "seeds": [0],
                "variants": [
                    {"name": "pre", "overrides": {"model.config.norm_placement": "pre"}},
                    {"name": "post", "overrides": {"model.config.norm_placement": "post"}},
                ],
            },
            sort_keys=False,
        )
    )
    return path


def wait_for(condition, timeout: float, what: str, process: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(
                f"the sweep exited ({process.returncode}) before {what}:\n{log.read_text() if log else ''}"
            )
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{log.read_text() if log else ''}")


@pytest.mark.slow
def test_sweep_killed_resumed_and_compared(tmp_path, text_corpus, capsys):
    from andrea_lab.commands.compare import main as compare_main

    suite = write_suite(tmp_path, text_corpus)
    runs = tmp_path / "runs"
    env = {**os.environ, "ANDREA_LAB_CACHE": str(tmp_path / "cache")}
    sweep = [*ANDREA, "sweep", str(suite), "--runs-dir", str(runs), "--no-check"]
    first, second = runs / "micro" / "pre" / "lr1e-3-seed0", runs / "micro" / "post" / "lr1e-3-seed0"

    # 1. Start, let the first run finish and the second one start, then kill the whole process group.
    log = tmp_path / "first.log"
    with log.open("w") as handle:
        process = subprocess.Popen(
            sweep, cwd=tmp_path, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for(lambda: (first / DONE_MARKER).exists(), 300, "the first run to finish", process, log)
        # Killed as soon as it is launched: a warm worker's micro fit can end within the second it once waited.
        wait_for(lambda: (second / START_MARKER).exists(), 60, "the second run to start", process, log)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert "[1/4] pre lr=1e-3 seed=0 ... done in" in log.read_text()
    assert second.exists() and not (second / DONE_MARKER).exists()

    # 2. Resume (two fits at a time): the finished run is skipped, the killed one moved aside and redone.
    result = subprocess.run([*sweep, "--jobs", "2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr}"
    assert "[1/4] pre lr=1e-3 seed=0 ... skipped (finished before" in out
    assert "[2/4] post lr=1e-3 seed=0: unfinished run directory moved aside to lr1e-3-seed0.interrupted-" in out
    assert "4 runs: 3 finished, 1 skipped" in out
    aside = [p for p in second.parent.iterdir() if ".interrupted-" in p.name]
    assert len(aside) == 1 and (aside[0] / START_MARKER).exists(), "moved aside, never deleted"
    for variant in ("pre", "post"):
        for lr in ("1e-3", "1e-2"):
            run_dir = runs / "micro" / variant / f"lr{lr}-seed0"
            assert (run_dir / DONE_MARKER).exists() and list(run_dir.glob("events.out.tfevents.*"))
            config = yaml.safe_load((run_dir / "config.yaml").read_text())
            assert config["model"]["config"]["norm_placement"] == variant
            assert config["model"]["lr"] == float(lr)
            assert config["seed_everything"] == 0 and config["data"]["seed"] == 0
    start = json.loads((second / START_MARKER).read_text())
    assert (start["variant"], start["lr"], start["seed"]) == ("post", 1e-3, 0)

    # 3. `andrea compare` (in this process: `andrea compare` is this function): a row per variant in
    #    Markdown and CSV, and the plots.
    capsys.readouterr()
    assert compare_main([str(runs / "micro")]) == 0
    printed = capsys.readouterr().out
    out_dir = runs / "micro" / "compare"
    markdown = (out_dir / "comparison.md").read_text()
    summary_table = markdown.split("## Per learning rate")[0]
    summary_rows = [line for line in summary_table.splitlines() if line.startswith(("| pre | 2 |", "| post | 2 |"))]
    assert len(summary_rows) == 2, markdown
    assert "## At initialisation" in markdown, "the StabilityMonitor's step-0 probe reaches the report"
    assert "left out" not in markdown, "the run moved aside is not a run of the comparison"
    csv_lines = (out_dir / "comparison.csv").read_text().splitlines()
    assert len(csv_lines) == 3 and csv_lines[0].startswith("suite,variant,runs,seeds,tuning_budget,best_lr")
    assert {line.split(",")[1] for line in csv_lines[1:]} == {"pre", "post"}
    assert len((out_dir / "runs.csv").read_text().splitlines()) == 1 + 4
    for name in ("loss_curves.png", "loss_vs_lr.png", "grad_norm_init.png", "delta_ratio_init.png"):
        assert (out_dir / name).stat().st_size > 1000
    assert (out_dir / "grad_norm_init.png").exists() or "gradient norm by layer at init: skipped" in markdown
    assert "| pre | 2 |" in printed


@pytest.mark.slow
def test_preflight_names_the_variant_and_the_bad_override(tmp_path, text_corpus, capsys):
    from andrea_lab.commands.sweep import main

    suite = write_suite(tmp_path, text_corpus)
    document = yaml.safe_load(suite.read_text())
    document["variants"].append({"name": "typo", "overrides": {"model.config.norm_placment": "post"}})
    document["variants"].append({"name": "no-such-plugin", "overrides": {"model.config.norm_placement": "sandwhich"}})
    suite.write_text(yaml.safe_dump(document, sort_keys=False))
    code = main([str(suite), "--runs-dir", str(tmp_path / "runs"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "variant 'typo'" in err and "--model.config.norm_placment" in err
    assert "variant 'no-such-plugin'" in err and "sandwhich" in err
    assert "variant 'pre'" not in err and "variant 'post'" not in err
    assert not (tmp_path / "runs").exists()


def test_runs_made_with_other_settings_are_neither_done_nor_overwritten(tmp_path, text_corpus, capsys):
    from andrea_lab.cli import main as cli_main
    from andrea_lab.experiments.sweep.plan import plan_sweep
    from andrea_lab.experiments.sweep.suite import load_suite
    from andrea_lab.runs.directory import START_MARKER, RunRecord, write_record

    suite_file = write_suite(tmp_path, text_corpus)
    runs = tmp_path / "runs"
    for spec in plan_sweep(load_suite(suite_file), runs):  # a finished sweep, as the runner leaves it
        spec.run_dir.mkdir(parents=True)
        (spec.run_dir / START_MARKER).write_text(json.dumps({"command": list(spec.command)}))
        write_record(spec.run_dir, RunRecord(status="finished"))
    args = ["sweep", str(suite_file), "--runs-dir", str(runs), "--no-check", "--set", "trainer.max_steps=500"]
    assert cli_main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("refused, made with other settings (--trainer.max_steps 10 -> 500)") == 4
    assert cli_main(args) == 2
    assert "4 run(s)" in capsys.readouterr().err
    assert cli_main(["sweep", str(suite_file), "--runs-dir", str(runs), "--no-check", "--dry-run"]) == 0
    assert capsys.readouterr().out.count("skip (finished)") == 4


def test_pinning_what_a_run_already_had_keeps_it_done_and_any_other_value_is_refused(tmp_path, text_corpus, capsys):
    """A suite that pins the value its base config gave when it ran (cpu-base's init moved from 0.02 to
    1/sqrt(d_model); the committed suites pin 0.02) still counts its runs as done; a run whose saved
    config holds another value, or has no saved config, is refused as made with other settings."""
    from andrea_lab.cli import main as cli_main
    from andrea_lab.experiments.sweep.plan import plan_sweep
    from andrea_lab.experiments.sweep.suite import load_suite
    from andrea_lab.runs.directory import START_MARKER, RunRecord, write_record

    suite_file = write_suite(tmp_path, text_corpus)
    runs = tmp_path / "runs"
    specs = plan_sweep(load_suite(suite_file), runs)
    for spec in specs:
        spec.run_dir.mkdir(parents=True)
        (spec.run_dir / START_MARKER).write_text(json.dumps({"command": list(spec.command)}))
        (spec.run_dir / "config.yaml").write_text(yaml.safe_dump({"model": {"config": {"init_std": 0.02}}}))
        write_record(spec.run_dir, RunRecord(status="finished"))
    (specs[0].run_dir / "config.yaml").unlink()
    base = ["sweep", str(suite_file), "--runs-dir", str(runs), "--no-check", "--dry-run"]
    assert cli_main([*base, "--set", "model.config.init_std=0.02"]) == 0
    out = capsys.readouterr().out
    assert out.count("skip (finished)") == 3
    assert out.count("refused, made with other settings (--model.config.init_std (unset) -> 0.02)") == 1
    assert cli_main([*base, "--set", "model.config.init_std=0.125"]) == 0
    assert capsys.readouterr().out.count("(--model.config.init_std (unset) -> 0.125)") == 4


def test_a_run_directory_with_a_link_is_refused_before_the_sweep_writes_there(tmp_path, text_corpus, capsys):
    from andrea_lab.cli import main as cli_main
    from andrea_lab.experiments.sweep.plan import plan_sweep
    from andrea_lab.experiments.sweep.suite import load_suite

    suite_file = write_suite(tmp_path, text_corpus)
    run_dir = plan_sweep(load_suite(suite_file), tmp_path / "runs")[0].run_dir
    run_dir.mkdir(parents=True)
    (run_dir / "sweep.log").symlink_to(tmp_path / "login_script.sh")
    assert cli_main(["sweep", str(suite_file), "--runs-dir", str(tmp_path / "runs"), "--no-check"]) == 2
    assert "sweep.log is a symbolic link" in capsys.readouterr().err
    assert not (tmp_path / "login_script.sh").exists()
