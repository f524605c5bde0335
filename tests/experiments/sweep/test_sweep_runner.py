"""The runner with stand-in commands (tiny Python one-liners instead of `andrea fit`): markers, progress,
skipping finished runs, moving unfinished ones aside, failures that do not stop the sweep, parallel jobs,
and the lock that keeps two sweeps off one directory."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
import time

import pytest
import yaml

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.experiments.sweep.executors import LocalExecutor
from andrea_lab.experiments.sweep.plan import plan_sweep, suite_runs_dir
from andrea_lab.experiments.sweep.runner import Runner, SweepLock, SweepLockedError, report
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.runs.directory import DONE_MARKER, FAILED_MARKER, LOG_FILE, START_MARKER, run_state

#: A stand-in fit: writes summary.json like the RunSummary callback, with a loss that depends on the lr.
SUCCEED = (
    "import json, os, sys, time; d = sys.argv[1]; time.sleep(float(sys.argv[3])); "
    "json.dump({'schema': 1, 'status': 'finished', 'final_val_loss': 4.0 + float(sys.argv[2])}, "
    "open(os.path.join(d, 'summary.json'), 'w'))"
)
FAIL = "import sys; print('boom: something broke'); sys.exit(3)"


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "base.yaml").write_text("model: {}\n")
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": "base.yaml",
                "lrs": [0.25, 0.5],
                "seeds": [0],
                "variants": [{"name": "good"}, {"name": "bad"}],
            },
            sort_keys=False,
        )
    )
    return load_suite(tmp_path / "s.yaml")


def stand_in(specs, sleep=0.0, failing=("bad",)):
    """The planned runs with their fit command replaced by a quick stand-in."""
    result = []
    for spec in specs:
        if spec.variant in failing:
            command = (sys.executable, "-c", FAIL)
        else:
            command = (sys.executable, "-c", SUCCEED, str(spec.run_dir), str(spec.lr), str(sleep))
        result.append(dataclasses.replace(spec, command=command))
    return result


def run(specs, jobs=1):
    out = io.StringIO()
    outcomes = Runner(specs, jobs=jobs, out=out, poll_s=0.02).run()
    report(outcomes, out)
    return outcomes, out.getvalue()


def test_runs_all_reports_failures_at_the_end_and_keeps_going(suite, tmp_path):
    specs = stand_in(plan_sweep(suite, tmp_path / "runs"))
    outcomes, out = run(specs)
    assert [o.state for o in outcomes] == ["finished", "failed", "finished", "failed"]
    assert "[1/4] good lr=2.5e-1 seed=0 ... done in 0 s, val 4.25" in out
    assert "[2/4] bad lr=2.5e-1 seed=0 ... FAILED (exit status 3)" in out
    assert "[3/4] good lr=5e-1 seed=0 ... done in 0 s, val 4.50" in out
    assert "4 runs: 2 finished, 2 failed" in out
    assert "FAILED bad lr=5e-1 seed=0 (exit status 3)" in out and "boom: something broke" in out
    good, bad = specs[0].run_dir, specs[1].run_dir
    assert json.loads((good / DONE_MARKER).read_text())["status"] == "finished"
    start = json.loads((good / START_MARKER).read_text())
    assert (start["suite"], start["variant"], start["lr"], start["seed"], start["data_seed"]) == (
        "s",
        "good",
        0.25,
        0,
        0,
    )
    assert start["command"] == list(specs[0].command)
    assert json.loads((bad / FAILED_MARKER).read_text())["returncode"] == 3
    assert "boom" in (bad / LOG_FILE).read_text()
    assert run_state(good) == "finished" and run_state(bad) == "failed"


def test_the_command_exits_non_zero_when_a_run_failed(suite, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep_command, "plan_sweep", lambda *args, **kwargs: stand_in(plan_sweep(*args, **kwargs)))
    # --launcher local: the default (warm) would import torch in its worker for these stand-ins; the warm
    # path's command end to end is tests/commands/test_sweep.py.
    code = sweep_command.main(
        [str(suite.path), "--runs-dir", str(tmp_path / "runs"), "--no-check", "--launcher", "local"]
    )
    out = capsys.readouterr().out
    assert code == sweep_command.EXIT_FAILED_RUNS
    assert "4 runs: 2 finished, 2 failed" in out


def test_a_rerun_skips_finished_runs_and_moves_unfinished_ones_aside(suite, tmp_path):
    specs = stand_in(plan_sweep(suite, tmp_path / "runs"), failing=())
    run(specs[:1])
    # A run killed midway: its directory exists with only the start marker and some output.
    killed = specs[1].run_dir
    killed.mkdir(parents=True)
    (killed / START_MARKER).write_text("{}")
    (killed / "events.out.tfevents.0").write_text("partial")
    outcomes, out = run(specs)
    assert [o.state for o in outcomes] == ["skipped", "finished", "finished", "finished"]
    assert "[1/4] good lr=2.5e-1 seed=0 ... skipped (finished before, val 4.25)" in out
    assert "[2/4] bad lr=2.5e-1 seed=0: unfinished run directory moved aside to lr2.5e-1-seed0.interrupted-" in out
    aside = [p for p in killed.parent.iterdir() if ".interrupted-" in p.name]
    assert len(aside) == 1 and (aside[0] / "events.out.tfevents.0").read_text() == "partial"
    assert run_state(killed) == "finished"
    # A failed run is rerun too, its directory kept as .failed-<time>
    (killed / DONE_MARKER).unlink()
    (killed / "summary.json").unlink()
    (killed / FAILED_MARKER).write_text("{}")
    outcomes, out = run(specs)
    assert [o.state for o in outcomes] == ["skipped", "finished", "skipped", "skipped"]
    assert any(".failed-" in p.name for p in killed.parent.iterdir())


def test_parallel_jobs_overlap_and_all_finish(suite, tmp_path):
    specs = stand_in(plan_sweep(suite, tmp_path / "runs"), sleep=1.0, failing=())
    started = time.monotonic()
    outcomes, out = run(specs, jobs=4)
    elapsed = time.monotonic() - started
    assert [o.state for o in outcomes] == ["finished"] * 4
    assert elapsed < 4 * 1.0, f"4 one-second runs with 4 jobs took {elapsed:.1f} s"
    assert out.count("started") == 4 and out.count("done in") == 4
    assert "[4/4] bad lr=5e-1 seed=0 ... done in" in out  # parallel runs repeat their label when they end


def test_parallel_fits_share_the_cpu_threads(suite, tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = LocalExecutor(jobs=2, gpus=["3", "5"]).env(slot=1)
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert "OMP_NUM_THREADS" not in LocalExecutor(jobs=1).env(0)


def test_one_sweep_at_a_time_per_suite_directory(suite, tmp_path):
    directory = suite_runs_dir(tmp_path / "runs", suite)
    with SweepLock(directory):
        with pytest.raises(SweepLockedError, match=f"another `andrea sweep` is running on {directory}"):
            with SweepLock(directory):
                pass
    with SweepLock(directory):  # released
        pass


def test_dry_run_prints_the_plan_and_runs_nothing(suite, tmp_path, capsys):
    runs = tmp_path / "runs"
    code = sweep_command.main(
        [str(suite.path), "--runs-dir", str(runs), "--dry-run", "--no-check", "--lrs", "1e-3", "--seeds", "0,1"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "2 variants x 1 LRs (1e-3) x 2 seeds (0, 1) = 4 runs" in out
    assert "[1/4] good lr=1e-3 seed=0: run" in out and "--trainer.logger.init_args.version lr1e-3-seed1" in out
    assert not runs.exists()


def test_suite_errors_are_one_line_and_exit_2(tmp_path, capsys):
    code = sweep_command.main([str(tmp_path / "missing.yaml")])
    assert code == 2
    assert "andrea sweep: error: suite file" in capsys.readouterr().err


def test_set_adds_common_overrides_from_the_command_line(suite, tmp_path, capsys):
    code = sweep_command.main(
        [
            str(suite.path),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--dry-run",
            "--no-check",
            "--set",
            "trainer.max_steps=7",
            "--set",
            "data.corpus=/data/x.bin",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "--trainer.max_steps 7" in out and "--data.corpus /data/x.bin" in out
    code = sweep_command.main([str(suite.path), "--dry-run", "--no-check", "--set", "model.lr=0.1"])
    assert code == 2
    assert "--set: 'model.lr' is set by the sweep" in capsys.readouterr().err


def test_sigint_stops_the_running_fits_starts_nothing_new_and_marks_nothing_done(suite, tmp_path):
    import signal
    import subprocess

    runs = tmp_path / "runs"
    script = tmp_path / "drive.py"
    script.write_text(f"""
import dataclasses, sys
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.runner import Runner, report
from andrea_lab.experiments.sweep.suite import load_suite
specs = [dataclasses.replace(s, command=(sys.executable, "-c", "import time; time.sleep(120)"))
         for s in plan_sweep(load_suite({str(suite.path)!r}), {str(runs)!r})]
runner = Runner(specs, jobs=2, poll_s=0.05)
report(runner.run())
sys.exit(130 if runner.stopping else 0)
""")
    specs = plan_sweep(suite, runs)
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 60
    while not all((s.run_dir / START_MARKER).exists() for s in specs[:2]):
        assert time.monotonic() < deadline and process.poll() is None, "the two first runs never started"
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 130, out
    assert "SIGINT: stopping" in out and "4 runs" not in out and "2 runs: 2 stopped" in out
    assert not any((s.run_dir / DONE_MARKER).exists() for s in specs)
    assert not specs[2].run_dir.exists(), "nothing new starts after the signal"
    assert all(run_state(s.run_dir) == "interrupted" for s in specs[:2]), "rerun (moved aside) next time"


def test_the_ray_launcher_without_ray_says_how_to_install_it(suite, tmp_path, monkeypatch, capsys):
    from andrea_lab.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: `import ray` raises ImportError
    code = main(["sweep", str(suite.path), "--runs-dir", str(tmp_path / "runs"), "--no-check", "--launcher", "ray"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--launcher ray needs Ray, which is not installed; install the extra: pip install -e '.[ray]'" in err
    assert "Traceback" not in err


def test_a_preempted_run_is_resumed_not_moved_aside(suite, tmp_path):
    """The resume rule: a run whose last attempt exited 4 with checkpoints/preempted.ckpt (and its manifest)
    newer than its start marker continues from it, with --ckpt_path added to its command."""
    spec = stand_in(plan_sweep(suite, tmp_path / "runs"))[0]
    run_dir = spec.run_dir
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / START_MARKER).write_text("{}")
    time.sleep(0.01)
    for name in ("preempted.ckpt", "preempted.ckpt.sha256.json"):
        (run_dir / "checkpoints" / name).write_text("x")
    (run_dir / FAILED_MARKER).write_text(json.dumps({"returncode": 4, "preempted": True}))
    outcomes, out = run([spec])
    assert f"resuming from {run_dir / 'checkpoints' / 'preempted.ckpt'}" in out
    assert [o.state for o in outcomes] == ["finished"] and not (run_dir / FAILED_MARKER).exists()
    started = json.loads((run_dir / START_MARKER).read_text())
    assert started["command"][-2:] == ["--ckpt_path", str(run_dir / "checkpoints" / "preempted.ckpt")]
    assert started["executor"] == "local" and json.loads((run_dir / DONE_MARKER).read_text())["executor"] == "local"
    assert not [p for p in run_dir.parent.iterdir() if ".interrupted-" in p.name or ".failed-" in p.name]


def test_a_run_preempted_during_the_sweep_goes_back_in_the_queue(suite, tmp_path):
    """Exit status 4 with a fresh preemption checkpoint: resumed in the same sweep (up to MAX_PREEMPTIONS)."""
    spec = plan_sweep(suite, tmp_path / "runs")[0]
    preempt_once = (
        "import os, sys; d = sys.argv[1]; c = os.path.join(d, 'checkpoints'); "
        "resumed = '--ckpt_path' in sys.argv; os.makedirs(c, exist_ok=True); "
        "[open(os.path.join(c, n), 'w').write('x') for n in ('preempted.ckpt', 'preempted.ckpt.sha256.json')]"
        " if not resumed else open(os.path.join(d, 'summary.json'), 'w').write('{\"status\": \"finished\"}'); "
        "sys.exit(0 if resumed else 4)"
    )
    spec = dataclasses.replace(spec, command=(sys.executable, "-c", preempt_once, str(spec.run_dir)))
    outcomes, out = run([spec])
    assert "preempted after" in out and "resumes from its checkpoint" in out and "resuming from" in out, out
    assert [o.state for o in outcomes] == ["finished"]


def test_local_fits_leave_ctrl_c_to_the_sweep(tmp_path):
    """The terminal's SIGINT reaches the whole foreground group; a fit ignores it and is stopped by the
    sweep's SIGTERM instead, which makes it write its preemption checkpoint."""
    check = "import signal, sys; sys.exit(0 if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else 1)"
    executor = LocalExecutor()
    handle = executor.launch(tmp_path / "run", [sys.executable, "-c", check], {"schema": 1}, 0)
    handle[0].wait(timeout=60)
    ended = executor.poll(handle)
    assert ended is not None and ended.returncode == 0
    assert json.loads((tmp_path / "run" / START_MARKER).read_text())["schema"] == 1
