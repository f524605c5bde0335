"""The Ray executor: every run of a sweep is a Ray task holding the CPUs/GPUs the suite asks for per run.

``andrea sweep SUITE --launcher ray`` connects to the cluster ``--ray-address`` or ``RAY_ADDRESS`` names,
or starts a local Ray on the spot. Ray does the scheduling (which node, when, with which GPU:
``CUDA_VISIBLE_DEVICES`` is set by Ray for a task with ``num_gpus``); the sweep runner keeps the plan,
the markers and the resume rule, exactly as with local subprocesses.

A task runs ``andrea fit`` as a subprocess of its worker, with the worker's own Python (andrea-lab and
the plugins must be installed on every node) and its output appended to the run's ``sweep.log``. The
run directories are written by the workers and read by the driver, so they must be on storage every
node sees (NFS, Lustre, ...): :meth:`RayExecutor.check_storage` proves that on every node before
anything runs. Stopping a running task (Ctrl-C of the sweep) goes through a stop file in its run
directory: the task sends the fit SIGTERM and returns when the checkpoint is written; a queued task is
cancelled. If the worker itself dies, the fit gets SIGTERM from the kernel (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Optional, Sequence

from andrea_lab.errors import UsageError
from andrea_lab.experiments.sweep.executors import Ended, write_start_marker
from andrea_lab.runs.directory import LOG_FILE, START_MARKER

INSTALL_HINT = "pip install -e '.[ray]'"
_PR_SET_PDEATHSIG = 1


def require_ray():
    """The ``ray`` module, or a :class:`UsageError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UsageError(
            f"--launcher ray needs Ray, which is not installed; install the extra: {INSTALL_HINT}"
        ) from None
    return ray


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Linux: SIGTERM the fit when the Ray worker that started it dies, so it checkpoints instead of
    running on as an orphan. Elsewhere a no-op."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


#: Written into a run directory by the driver to stop that run's task: the task sends its fit SIGTERM and
#: returns the fit's exit status once the checkpoint is written. (``ray.cancel`` of a running task
#: resolves its result at once, and a driver that then exits takes the cancellation with it.)
STOP_FILE = ".sweep-stop"


def run_fit(
    run_dir: str, command: Sequence[str], marker: dict[str, Any], cwd: Optional[str], env: dict[str, str]
) -> int:
    """The Ray task: write the start marker, run the fit, return its exit status. Asked to stop (the stop
    file, or ``ray.cancel``: KeyboardInterrupt here), it stops the fit as a preemption does and waits for it."""
    directory = Path(run_dir)
    write_start_marker(directory, {**marker, "node": socket.gethostname()})
    stop = directory / STOP_FILE
    argv = [sys.executable, *command[1:]]  # the worker's Python, not the driver's path
    with (directory / LOG_FILE).open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd if cwd and os.path.isdir(cwd) else None,
            env={**os.environ, **env},
            preexec_fn=_die_with_parent,
        )
        try:
            while process.poll() is None:  # not a blocking wait: a stop request must be able to interrupt it
                if stop.exists():
                    process.send_signal(signal.SIGTERM)
                    return process.wait()
                time.sleep(0.2)
            return process.returncode
        except KeyboardInterrupt:
            process.send_signal(signal.SIGTERM)
            process.wait()
            raise


def probe_storage(probe: str, token: str) -> Optional[str]:
    """On one node: can it read what the driver wrote, and write beside it? None, or what went wrong."""
    where = f"node {socket.gethostname()}"
    try:
        if Path(probe).read_text() != token:
            return f"{where} sees a different {probe} (not the same storage as the driver)"
        mine = Path(f"{probe}.{socket.gethostname()}")
        mine.write_text(token)
        mine.unlink()
    except OSError as exc:
        return f"{where}: {exc.strerror or exc} ({exc.filename or probe})"
    return None


class RayExecutor:
    """Runs each planned fit as a Ray task with ``cpus``/``gpus`` per run."""

    name = "ray"
    launched = "queued"  # what the progress line says once a run is handed over

    def __init__(self, address: Optional[str] = None, cpus: float = 1.0, gpus: float = 0.0, cwd: Optional[Path] = None):
        self.ray = require_ray()
        if not self.ray.is_initialized():
            # address None: RAY_ADDRESS if set, else a local Ray started here (and stopped with this process).
            self.ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.cpus, self.gpus = cpus, gpus
        self.cwd = str(cwd or Path.cwd())
        self.task = self.ray.remote(run_fit).options(num_cpus=cpus, num_gpus=gpus, max_retries=0)

    def check_storage(self, directory: Path) -> None:
        """Every alive node must see the driver's files under ``directory`` and write there."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        directory.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex
        probe = directory / f".sweep-probe-{token}"
        probe.write_text(token)
        try:
            task = self.ray.remote(probe_storage)
            refs = [
                task.options(
                    num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                ).remote(str(probe), token)
                for node in self.ray.nodes()
                if node.get("Alive")
            ]
            problems = [problem for problem in self.ray.get(refs, timeout=300) if problem]
        finally:
            probe.unlink(missing_ok=True)
        if problems:
            raise UsageError(
                f"the runs directory {directory} is not usable by every Ray worker: "
                f"{'; '.join(problems)}. Runs must be on storage every node sees and can write "
                "(a shared file system); pass --runs-dir on one"
            )

    def env(self) -> dict[str, str]:
        return {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(max(1, int(self.cpus)))}

    def launch(self, run_dir: Path, command: Sequence[str], marker: dict[str, Any], slot: int) -> Any:
        marker = {**marker, "resources": {"cpus": self.cpus, "gpus": self.gpus}}
        (run_dir / STOP_FILE).unlink(missing_ok=True)
        ref = self.task.remote(str(run_dir), list(command), marker, self.cwd, self.env())
        return ref, run_dir, time.time()

    def _started(self, handle: Any) -> bool:
        _, run_dir, submitted = handle
        marker = run_dir / START_MARKER
        return marker.is_file() and marker.stat().st_mtime >= submitted - 1

    def poll(self, handle: Any) -> Optional[Ended]:
        handle = handle[0]
        ready, _ = self.ray.wait([handle], timeout=0)
        if not ready:
            return None
        try:
            return Ended(self.ray.get(handle))
        except self.ray.exceptions.TaskCancelledError:
            return Ended(None, "cancelled")
        except self.ray.exceptions.RayError as exc:  # the worker or its node died
            return Ended(None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def stop(self, handle: Any) -> None:
        """A running task is asked through its stop file and returns once its fit has checkpointed; a
        queued one is cancelled (it has nothing to save)."""
        ref, run_dir, _ = handle
        if self._started(handle):
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / STOP_FILE).write_text("stop\n")
        else:
            self.ray.cancel(ref)

    def kill(self, handle: Any) -> None:
        self.ray.cancel(handle[0], force=True)
