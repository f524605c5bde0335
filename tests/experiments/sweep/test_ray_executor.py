"""`--launcher ray` on a real local Ray (2 CPUs, started once for this module): the same plan, markers and
resume rule as local subprocesses; a failing run is reported with its log and the others go on; a runs
directory a worker cannot write is refused; a sweep stopped mid-fit resumes from the fit's checkpoint."""

from __future__ import annotations

import dataclasses
import io
import json
import socket
import sys
import threading
import uuid
from pathlib import Path

import pytest
import yaml

from andrea_lab.errors import UsageError
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.runner import Runner, report
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.runs.directory import (
    DONE_MARKER,
    FAILED_MARKER,
    PREEMPTED_CHECKPOINT,
    START_MARKER,
    read_record,
    run_state,
)

ray = pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")

pytestmark = pytest.mark.slow

#: A stand-in fit (as in test_sweep_runner): writes summary.json like the RunSummary callback.
SUCCEED = (
    "import json, os, sys; d = sys.argv[1]; "
    "json.dump({'schema': 1, 'status': 'finished', 'final_val_loss': 4.0 + float(sys.argv[2])}, "
    "open(os.path.join(d, 'summary.json'), 'w'))"
)
FAIL = "import sys; print('boom: something broke'); sys.exit(3)"
REPO = Path(__file__).resolve().parents[3]
#: A seconds-long fit on experiments/cpu-base.yaml (long enough to be stopped in the middle).
MICRO_COMMON = {
    "model.config.d_model": 32,
    "model.config.n_layer": 2,
    "model.config.n_head": 2,
    "data.batch_size": 8,
    "data.max_val_batches": 2,
    "trainer.limit_val_batches": 2,
    "trainer.num_sanity_val_steps": 0,
    "trainer.max_steps": 40,
    "trainer.val_check_interval": 5,
    "model.warmup_steps": 2,
    "checkpoint.monitor": "null",
    "checkpoint.every_n_train_steps": 5,
    "checkpoint.save_top_k": -1,
    "checkpoint.filename": "step{step}",
}


@pytest.fixture(scope="module")
def local_ray():
    """One real Ray for the module: starting one takes seconds."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def executor(local_ray):
    from andrea_lab.experiments.sweep.ray_executor import RayExecutor

    return RayExecutor(cpus=1)


def write_suite(directory, common=None, variants=("good", "bad"), lrs=(0.25, 0.5)):
    (directory / "base.yaml").write_text("model: {}\n")
    (directory / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "base": "base.yaml",
                "lrs": list(lrs),
                "seeds": [0],
                "common": common or {},
                "variants": [{"name": name} for name in variants],
                "resources": {"cpus": 1},
            },
            sort_keys=False,
        )
    )
    return load_suite(directory / "s.yaml")


def test_a_ray_sweep_records_its_executor_and_a_failure_does_not_stop_it(tmp_path, executor):
    specs = [
        dataclasses.replace(
            spec,
            command=(sys.executable, "-c", FAIL)
            if spec.variant == "bad"
            else (sys.executable, "-c", SUCCEED, str(spec.run_dir), str(spec.lr)),
        )
        for spec in plan_sweep(write_suite(tmp_path), tmp_path / "runs")
    ]
    out = io.StringIO()
    outcomes = Runner(specs, jobs=len(specs), out=out, poll_s=0.05, executor=executor).run()
    report(outcomes, out)
    text = out.getvalue()
    assert [o.state for o in outcomes] == ["finished", "failed", "finished", "failed"], text
    assert "4 runs: 2 finished, 2 failed" in text
    bad = specs[1].run_dir
    assert "FAILED (exit status 3) after" in text and f"log: {bad / 'sweep.log'}" in text
    assert "boom: something broke" in (bad / "sweep.log").read_text()
    for spec in specs:
        started = json.loads((spec.run_dir / START_MARKER).read_text())
        assert started["executor"] == "ray" and started["node"] == socket.gethostname()
        assert started["resources"] == {"cpus": 1.0, "gpus": 0.0}
    assert json.loads((specs[0].run_dir / DONE_MARKER).read_text())["executor"] == "ray"
    assert json.loads((bad / FAILED_MARKER).read_text())["executor"] == "ray"

    # The same command again: finished runs skipped, failed ones moved aside and rerun.
    out = io.StringIO()
    again = Runner(specs, jobs=len(specs), out=out, poll_s=0.05, executor=executor).run()
    assert [o.state for o in again] == ["skipped", "failed", "skipped", "failed"], out.getvalue()
    assert "unfinished run directory moved aside to lr2.5e-1-seed0.failed-" in out.getvalue()


def test_a_runs_directory_a_worker_cannot_write_is_refused(tmp_path, executor, monkeypatch):
    token = uuid.UUID(int=7)
    monkeypatch.setattr("andrea_lab.experiments.sweep.ray_executor.uuid.uuid4", lambda: token)
    directory = tmp_path / "runs" / "s"
    # The worker's probe write lands on a directory: it fails as a read-only or foreign mount would.
    (directory / f".sweep-probe-{token.hex}.{socket.gethostname()}").mkdir(parents=True)
    with pytest.raises(UsageError, match=r"is not usable by every Ray worker: node .*Is a directory.*shared file"):
        executor.check_storage(directory)
    assert not (directory / f".sweep-probe-{token.hex}").exists(), "the probe is cleaned up"


def test_a_sweep_stopped_mid_fit_resumes_from_the_fits_checkpoint(tmp_path, executor, text_corpus, monkeypatch):
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path / "cache"))
    suite = dataclasses.replace(
        write_suite(tmp_path, variants=("pre",), lrs=(1e-3,)),
        base=REPO / "experiments" / "cpu-base.yaml",
        common={**MICRO_COMMON, "data.corpus": str(text_corpus)},
    )
    specs = plan_sweep(suite, tmp_path / "runs")
    run_dir = specs[0].run_dir

    # 1. Stop the sweep (what Ctrl-C does) once the fit has written its first checkpoint (step 5). No deadline:
    # on a starved machine the first step can take minutes, and a stop before it would test nothing; if the
    # fit ends without a checkpoint the stopper gives up and the state check below says so.
    runner = Runner(specs, out=io.StringIO(), poll_s=0.1, executor=executor)
    sweep_over = threading.Event()

    def stop_when_training():
        while not list((run_dir / "checkpoints").glob("step*.ckpt")):
            if sweep_over.wait(0.1):
                return
        runner.stop()

    stopper = threading.Thread(target=stop_when_training, daemon=True)
    stopper.start()
    try:
        outcomes = runner.run()
    finally:
        sweep_over.set()
        stopper.join()
    assert [o.state for o in outcomes] == ["stopped"], runner.out.getvalue()
    assert (run_dir / PREEMPTED_CHECKPOINT).is_file(), (run_dir / "sweep.log").read_text()[-3000:]
    assert run_state(run_dir) == "interrupted" and not (run_dir / DONE_MARKER).exists()

    # 2. The same sweep again: the run continues from its checkpoint in its own directory, to the end.
    out = io.StringIO()
    outcomes = Runner(specs, out=out, poll_s=0.1, executor=executor).run()
    assert [o.state for o in outcomes] == ["finished"], out.getvalue() + (run_dir / "sweep.log").read_text()[-3000:]
    assert f"resuming from {run_dir / PREEMPTED_CHECKPOINT}" in out.getvalue()
    started = json.loads((run_dir / START_MARKER).read_text())
    assert started["executor"] == "ray" and started["resumed_from"] == str(run_dir / PREEMPTED_CHECKPOINT)
    assert started["command"][-2:] == ["--ckpt_path", str(run_dir / PREEMPTED_CHECKPOINT)]
    assert read_record(run_dir).steps == MICRO_COMMON["trainer.max_steps"]
    assert not [p for p in run_dir.parent.iterdir() if ".interrupted-" in p.name], "resumed, not moved aside"
