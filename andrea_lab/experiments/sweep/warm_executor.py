"""The warm executor (``andrea sweep``'s default): each run forked from a warm worker, one worker per slot.

Same contract as :class:`andrea_lab.experiments.sweep.executors.LocalExecutor` -- the fit's output in ``sweep.log``, the
start marker when it starts, SIGTERM to stop it as a preemption would, the sweep's lock inherited by the
fit -- but the fit does not start a Python of its own: a worker (:mod:`andrea_lab.experiments.sweep.warm_worker`)
started once per slot, with the slot's environment, has imported torch and Lightning and resolved the
suite's corpus, and forks the fit from itself. ``--launcher local`` keeps a fresh process per fit.

A worker that dies (killed, out of memory) loses only the run it was forking for: that run ends as
"lost by its executor" (its fit got SIGTERM and checkpointed, so the runner resumes it), and the slot's
next run starts a new worker.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from andrea_lab.experiments.sweep.executors import Ended, LocalExecutor, write_start_marker
from andrea_lab.experiments.sweep.warm_worker import WARM_MODULES
from andrea_lab.runs.directory import LOG_FILE

#: How long a worker may take to import torch and Lightning and resolve the corpus (a loaded machine).
READY_TIMEOUT_S = 600.0


class WorkerGone(Exception):
    """The worker's reply pipe closed: it exited or was killed."""


class Worker:
    """One warm worker process and its line-by-line reply pipe."""

    def __init__(
        self,
        env: dict[str, str],
        cwd: Optional[Path],
        lock_fd: Optional[int],
        corpora: Sequence[tuple[str, str]],
        modules: Sequence[str] = WARM_MODULES,
    ):
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-m",
                "andrea_lab.experiments.sweep.warm_worker",
                json.dumps([list(c) for c in corpora]),
                json.dumps(list(modules)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            env=env,
            pass_fds=(lock_fd,) if lock_fd is not None else (),
        )
        self.buffer = b""
        self.ready: Optional[dict[str, Any]] = None

    def message(self, timeout: float) -> Optional[dict[str, Any]]:
        """The next reply, None if none came within ``timeout`` seconds; :class:`WorkerGone` at its end."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            readable, _, _ = select.select([fd], [], [], timeout)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise WorkerGone()
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def wait_ready(self) -> dict[str, Any]:
        if self.ready is None:
            self.ready = self.message(READY_TIMEOUT_S)
            if self.ready is None:
                raise WorkerGone()
        return self.ready

    def start(self, command: Sequence[str], log: Path, cwd: Optional[Path]) -> int:
        """Hand the worker one fit; the fit's pid."""
        self.wait_ready()
        request = {"argv": list(command), "log": str(log), "cwd": str(cwd) if cwd else None}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        started = self.message(READY_TIMEOUT_S)
        if not started or "started" not in started:
            raise WorkerGone()
        return int(started["started"])

    def close(self, timeout: float = 30.0) -> None:
        """End of stdin ends the worker (after the fit it runs, if any); killed if it does not end in time."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


class Forked:
    """A handle: the run's fit (pid), the worker that forked it, and how it ended once known."""

    def __init__(self, worker: Optional[Worker], slot: int, pid: Optional[int], ended: Optional[Ended] = None):
        self.worker, self.slot, self.pid, self.ended = worker, slot, pid, ended


class WarmExecutor(LocalExecutor):
    """Runs each fit as a fork of the slot's warm worker (replaced when it dies); ``modules`` are what the
    workers import before forking (tests use none, for stand-in commands). The workers of all slots start
    together at the first launch, so that a sweep whose runs are all done starts none."""

    name = "warm"
    launched = "started"

    def __init__(
        self,
        jobs: int = 1,
        gpus: Optional[Sequence[str]] = None,
        cwd: Optional[Path] = None,
        lock_fd: Optional[int] = None,
        corpora: Sequence[tuple[str, str]] = (),
        modules: Sequence[str] = WARM_MODULES,
    ):
        super().__init__(jobs, gpus, cwd, lock_fd)
        self.corpora, self.modules = list(corpora), list(modules)
        self.workers: dict[int, Worker] = {}

    def _new_worker(self, slot: int) -> Worker:
        return Worker(self.env(slot), self.cwd, self.lock_fd, self.corpora, self.modules)

    def _worker(self, slot: int) -> Worker:
        if not self.workers:
            self.workers = {number: self._new_worker(number) for number in range(self.jobs)}
        worker = self.workers.get(slot)
        if worker is None or worker.process.poll() is not None:
            if worker is not None:
                worker.close()
            worker = self.workers[slot] = self._new_worker(slot)
        return worker

    def launch(self, run_dir: Path, command: Sequence[str], marker: dict[str, Any], slot: int) -> Forked:
        write_start_marker(run_dir, marker)
        worker = self._worker(slot)
        try:
            return Forked(worker, slot, worker.start(command, run_dir / LOG_FILE, self.cwd))
        except WorkerGone:
            self._retire(slot)
            return Forked(None, slot, None, Ended(None, "its warm worker exited before the fit started"))

    def _retire(self, slot: int) -> None:
        worker = self.workers.pop(slot, None)
        if worker is not None:
            worker.process.kill()
            worker.close()

    def poll(self, handle: Forked) -> Optional[Ended]:
        if handle.ended is None:
            try:
                message = handle.worker.message(0)
            except WorkerGone:
                self._retire(handle.slot)
                handle.ended = Ended(None, "its warm worker died")
                return handle.ended
            if message is not None and message.get("ended") == handle.pid:
                code = int(message["returncode"])
                handle.ended = Ended(code, f"killed by signal {-code}" if code < 0 else "")
        return handle.ended

    def _signal(self, handle: Forked, signum: int) -> None:
        if handle.ended is None and handle.pid is not None and self.poll(handle) is None:
            try:
                os.kill(handle.pid, signum)
            except ProcessLookupError:
                pass

    def stop(self, handle: Forked) -> None:
        self._signal(handle, signal.SIGTERM)

    def kill(self, handle: Forked) -> None:
        self._signal(handle, signal.SIGKILL)

    def close(self) -> None:
        """End every worker (the runner calls this when the sweep is over)."""
        for slot in list(self.workers):
            self.workers.pop(slot).close()
