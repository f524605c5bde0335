"""Executors: how the sweep runner starts one planned run, asks whether it ended, and stops it.

The runner (:mod:`andrea_lab.experiments.sweep.runner`) owns everything a sweep means: the plan, the resume rule
(:func:`andrea_lab.runs.directory.run_state`), moving unfinished runs aside, resuming preempted ones, the done
and failed markers, the report. An executor only runs a command with its output in the run's
``sweep.log``, and writes the start marker at the moment the run really starts (on a cluster that is
when the scheduler gives it a worker, not when it is queued). Three executors of the same plan:

* :class:`andrea_lab.experiments.sweep.warm_executor.WarmExecutor` — fits forked on this machine from warm workers
  that imported torch and Lightning once (``--launcher warm``, the default);
* :class:`LocalExecutor` — a fresh subprocess per fit on this machine (``--launcher local``);
* :class:`andrea_lab.experiments.sweep.ray_executor.RayExecutor` — one Ray task per run (``--launcher ray``).

An executor that keeps processes between runs has a ``close()``, which the runner calls at the end.

``stop`` asks a run to end the way a preemption does (SIGTERM: the fit writes its preemption checkpoint
and exits with status 4), so a stopped run is resumed, not restarted, by the next sweep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Optional, Protocol, Sequence

from andrea_lab.files import write_json_atomic
from andrea_lab.runs.directory import LOG_FILE, START_MARKER, START_TIME_FORMAT


def now() -> str:
    return time.strftime(START_TIME_FORMAT)


class Ended:
    """How a run ended, as far as its executor knows: ``returncode`` None when the executor lost it (a
    worker or node died, or the run was cancelled before it exited); ``detail`` says why."""

    def __init__(self, returncode: Optional[int], detail: str = ""):
        self.returncode = returncode
        self.detail = detail


class Executor(Protocol):
    """What the runner needs from an engine that runs fits."""

    #: Recorded in every marker (``executor``), so that a run done elsewhere than asked for shows.
    name: str
    #: The progress line's word for a run handed over: "started", or "queued" where a scheduler decides.
    launched: str

    def check_storage(self, directory: Path) -> None:
        """Raise :class:`andrea_lab.errors.UsageError` if runs cannot write ``directory`` (it must be shared)."""

    def launch(self, run_dir: Path, command: Sequence[str], marker: dict[str, Any], slot: int) -> Any:
        """Start (or queue) the run; returns a handle for :meth:`poll`, :meth:`stop` and :meth:`kill`."""

    def poll(self, handle: Any) -> Optional[Ended]:
        """None while the run is running or queued."""

    def stop(self, handle: Any) -> None:
        """Ask the run to stop as if preempted (it checkpoints first)."""

    def kill(self, handle: Any) -> None:
        """End the run now (only when the runner itself fails)."""


def write_start_marker(run_dir: Path, marker: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / START_MARKER, {**marker, "started": now(), "pid": os.getpid()})


def _ignore_sigint() -> None:  # pragma: no cover - runs in the forked child
    """A fit under the sweep ignores the terminal's Ctrl-C (Python keeps an ignored SIGINT ignored): the sweep
    stops it with SIGTERM instead, so that it writes its preemption checkpoint rather than just ending."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def shared_threads(jobs: int) -> Optional[int]:
    """torch's threads in each of ``jobs`` local fits run at once, unless OMP_NUM_THREADS says otherwise: N fits on
    one CPU share its cores instead of each taking all of them; None for one fit at a time (torch chooses)."""
    return max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None


class LocalExecutor:
    """Each run an ``andrea fit`` subprocess of this process, its output appended to ``sweep.log``.

    The sweep's lock descriptor is passed on to the fits, so a fit that outlives its sweep still keeps a
    second sweep off its directory (:class:`andrea_lab.experiments.sweep.runner.SweepLock`)."""

    name = "local"
    launched = "started"  # what the progress line says once a run is handed over

    def __init__(
        self,
        jobs: int = 1,
        gpus: Optional[Sequence[str]] = None,
        cwd: Optional[Path] = None,
        lock_fd: Optional[int] = None,
    ):
        self.jobs = jobs
        self.gpus = list(gpus) if gpus else None
        self.cwd = cwd
        self.lock_fd = lock_fd

    def check_storage(self, directory: Path) -> None:
        """Local runs write where this process does: nothing to check beyond the markers' own writes."""

    def env(self, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        if "OMP_NUM_THREADS" not in env and (threads := shared_threads(self.jobs)) is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        return env

    def launch(
        self, run_dir: Path, command: Sequence[str], marker: dict[str, Any], slot: int
    ) -> tuple[subprocess.Popen, IO[bytes]]:
        write_start_marker(run_dir, marker)
        log = (run_dir / LOG_FILE).open("ab")
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.cwd,
            env=self.env(slot),
            preexec_fn=_ignore_sigint,
            pass_fds=(self.lock_fd,) if self.lock_fd is not None else (),
        )
        return process, log

    def poll(self, handle: tuple[subprocess.Popen, IO[bytes]]) -> Optional[Ended]:
        process, log = handle
        code = process.poll()
        if code is None:
            return None
        log.close()
        return Ended(code, f"killed by signal {-code}" if code < 0 else "")

    def stop(self, handle: tuple[subprocess.Popen, IO[bytes]]) -> None:
        process, _ = handle
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self, handle: tuple[subprocess.Popen, IO[bytes]]) -> None:
        process, log = handle
        process.kill()
        log.close()
