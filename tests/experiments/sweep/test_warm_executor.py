"""The warm executor (``andrea sweep``'s default): runs forked from a warm worker behave as fresh processes do --
markers, logs, a crash that takes only its own run, a dead worker replaced, SIGTERM reaching the fit -- and
a real fit gives bit-identical train/loss curves and held-out loss to the same fit in a fresh process."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.commands import sweep as sweep_command
from andrea_lab.data import corpus as corpus_lib
from andrea_lab.experiments.compare.runs_table import read_scalars
from andrea_lab.experiments.sweep.executors import LocalExecutor
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.preflight import preflight
from andrea_lab.experiments.sweep.runner import Runner, report
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.experiments.sweep.warm_executor import WarmExecutor
from andrea_lab.runs.directory import LOG_FILE, START_MARKER, read_record

REPO = Path(__file__).resolve().parents[3]
PY = sys.executable
SUCCEED = "import os, sys; print('fine', sys.argv[1:]); print('parent', os.getppid())"
CRASH = "import os; print('parent', os.getppid()); print('about to crash', flush=True); os.abort()"
#: Exits 4 on SIGTERM, as a preempted fit does, after saying it is running (the file in argv[1]).
PREEMPTIBLE = (
    "import signal, sys, time, pathlib; signal.signal(signal.SIGTERM, lambda *a: sys.exit(4)); "
    "pathlib.Path(sys.argv[1]).write_text('up'); time.sleep(60)"
)


def ended(executor, handle, timeout=60.0):
    """Poll until the run ends (the deadline only keeps a broken test from hanging)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = executor.poll(handle)
        if result is not None:
            return result
        time.sleep(0.02)
    raise AssertionError("the run did not end")


def wait_for(path: Path, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "base.yaml").write_text("model: {}\n")
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(
            {"name": "s", "base": "base.yaml", "lrs": [0.25], "seeds": [0, 1, 2], "variants": [{"name": "v"}]},
            sort_keys=False,
        )
    )
    return load_suite(tmp_path / "s.yaml")


def test_a_crashing_run_takes_only_itself_and_is_reported_with_its_log(suite, tmp_path):
    import dataclasses

    specs = plan_sweep(suite, tmp_path / "runs")
    commands = [(PY, "-c", SUCCEED, "first"), (PY, "-c", CRASH), (PY, "-c", SUCCEED, "third")]
    specs = [dataclasses.replace(spec, command=command) for spec, command in zip(specs, commands)]
    executor = WarmExecutor(1, modules=())
    out = io.StringIO()
    outcomes = Runner(specs, out=out, poll_s=0.02, executor=executor).run()
    report(outcomes, out)
    assert [o.state for o in outcomes] == ["finished", "failed", "finished"]
    text = out.getvalue()
    assert "FAILED (exit status -6)" in text and "about to crash" in text  # the log's tail, in the report
    assert "fine ['third']" in (specs[2].run_dir / LOG_FILE).read_text()
    assert json.loads((specs[0].run_dir / START_MARKER).read_text())["executor"] == "warm"
    assert executor.workers == {}  # closed by the runner at the end
    assert all(json.loads((s.run_dir / START_MARKER).read_text())["pid"] == os.getpid() for s in specs)
    # One worker forked all three (the crash did not replace it): every fit has the same parent.
    parents = {
        line.split()[-1]
        for s in specs
        for line in (s.run_dir / LOG_FILE).read_text().splitlines()
        if line.startswith("parent ")
    }
    assert len(parents) == 1 and parents != {str(os.getpid())}


def test_a_dead_worker_loses_its_run_only_and_is_replaced(tmp_path):
    executor = WarmExecutor(1, modules=())
    flag = tmp_path / "up"
    (tmp_path / "a").mkdir()
    handle = executor.launch(tmp_path / "a", (PY, "-c", PREEMPTIBLE, str(flag)), {}, 0)
    first = executor.workers[0]
    wait_for(flag)
    first.process.kill()
    lost = ended(executor, handle)
    assert lost.returncode is None and "worker died" in lost.detail
    # The orphaned fit got SIGTERM from the kernel (it would checkpoint), so it does not run on.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(handle.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the fit of a dead worker kept running")
    (tmp_path / "b").mkdir()
    again = executor.launch(tmp_path / "b", (PY, "-c", SUCCEED, "after"), {}, 0)
    assert ended(executor, again).returncode == 0
    assert executor.workers[0] is not first
    executor.close()


def test_stop_reaches_the_fit_as_sigterm(tmp_path):
    executor = WarmExecutor(1, modules=())
    flag = tmp_path / "up"
    handle = executor.launch(tmp_path, (PY, "-c", PREEMPTIBLE, str(flag)), {}, 0)
    wait_for(flag)
    executor.stop(handle)
    assert ended(executor, handle).returncode == 4
    executor.close()


def test_sweep_forks_from_warm_workers_by_default_and_local_keeps_fresh_processes():
    parser = sweep_command.build_parser()
    assert parser.parse_args(["s.yaml"]).launcher == "warm"
    local = sweep_command.make_executor(parser.parse_args(["s.yaml", "--launcher", "local"]), None, 1, None, None)
    assert type(local) is LocalExecutor


def test_preflight_names_the_corpus_the_workers_resolve_once(monkeypatch):
    specs = plan_sweep(load_suite(REPO / "experiments/suites/aa.yaml"), "runs", lrs=[1e-3], seeds=[0])
    assert preflight(specs) == ([], [("stdlib", "text")])
    monkeypatch.setattr(corpus_lib, "_REMEMBERED", {})
    assert corpus_lib.resolve_corpus(str(REPO / "experiments")) is corpus_lib.resolve_corpus(str(REPO / "experiments"))
    monkeypatch.setattr(corpus_lib, "_REMEMBERED", None)
    assert corpus_lib.resolve_corpus(str(REPO / "experiments")) is not corpus_lib.resolve_corpus(
        str(REPO / "experiments")
    )


def _fit(text_corpus: Path, runs: Path, version: str) -> list[str]:
    """A cpu-base fit shrunk to seconds, on the small test corpus."""
    return [
        PY,
        "-m",
        "andrea_lab.cli",
        "fit",
        "--config",
        str(REPO / "experiments/cpu-base.yaml"),
        *MICRO_OVERRIDES,
        "--data.corpus",
        str(text_corpus),
        "--trainer.max_steps",
        "12",
        "--trainer.val_check_interval",
        "6",
        "--trainer.log_every_n_steps",
        "1",
        "--heldout.max_tokens",
        "4096",
        "--seed_everything",
        "3",
        "--data.seed",
        "3",
        "--trainer.logger.init_args.save_dir",
        str(runs),
        "--trainer.logger.init_args.name",
        "bits",
        "--trainer.logger.init_args.version",
        version,
    ]


@pytest.mark.slow
def test_a_forked_fit_is_bit_identical_to_a_fresh_process(text_corpus, tmp_path):
    runs = tmp_path / "runs"
    results = {}
    for name, executor in (
        ("fresh", LocalExecutor(1)),
        ("warm", WarmExecutor(1, corpora=[(str(text_corpus), "text")])),
    ):
        run_dir = runs / "bits" / name
        handle = executor.launch(run_dir, _fit(text_corpus, runs, name), {}, 0)
        code = ended(executor, handle, timeout=600).returncode
        assert code == 0, (run_dir / LOG_FILE).read_text()[-3000:]
        getattr(executor, "close", lambda: None)()
        record = read_record(run_dir)
        results[name] = (read_scalars(run_dir)["train/loss"], record.heldout.loss, record.final_val_loss)
    fresh, warm = results["fresh"], results["warm"]
    assert len(fresh[0]) == 12 and fresh[1] is not None
    assert warm == fresh  # exact floats: same curve, same held-out loss, same final val loss
