"""Running a planned sweep: one ``andrea fit`` subprocess per run, N at a time, resumable.

Per run directory the sweep writes ``sweep-run.json`` (what and how, before the fit starts),
``sweep.log`` (the fit's stdout and stderr), then ``sweep-done.json`` once the fit exited 0, or
``sweep-failed.json`` if it did not. Finished runs are skipped; an unfinished directory (killed sweep,
failed fit) is moved aside — never deleted — and the run starts again from scratch.

One sweep at a time per suite directory: ``<runs-dir>/<suite>/.sweep.lock`` is held with ``flock`` by the
sweep *and* inherited by the fits it starts, so a fit that outlives its sweep (the sweep was killed with
SIGKILL or SIGTERM without its process group) still blocks a second sweep from moving its directory aside.

On SIGINT/SIGTERM the sweep starts nothing new, sends SIGTERM to its running fits, waits for them and
writes no done marker for them: the next sweep reruns them.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional, Sequence

from andrea_lab.files import write_json_atomic
from andrea_lab.rundir import (DONE_MARKER, DONE_STATES, FAILED_MARKER, LOCK_FILE, LOG_FILE, START_MARKER, move_aside,
                               read_record, run_state)
from andrea_lab.sweep.plan import RunSpec

try:  # POSIX only; elsewhere sweeps are simply not locked
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


class SweepLockedError(RuntimeError):
    """Another sweep (or a fit it started) is using the same suite directory."""


@dataclass
class Outcome:
    spec: RunSpec
    state: str  # skipped | finished | diverged | failed | stopped
    seconds: Optional[float] = None
    val_loss: Optional[float] = None
    returncode: Optional[int] = None
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.state == "failed"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def final_val_loss(run_dir: Path) -> Optional[float]:
    """The run's headline loss from its record (:attr:`RunRecord.headline_loss`), None without one."""
    record = read_record(run_dir)
    return None if record is None else record.headline_loss


def _fmt_loss(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if math.isfinite(value) else str(value)


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class SweepLock:
    """``flock`` on ``<suite dir>/.sweep.lock``; the descriptor is passed on to the fits."""

    def __init__(self, directory: Path):
        self.path = directory / LOCK_FILE
        self.fd: Optional[int] = None

    def __enter__(self) -> "SweepLock":
        if fcntl is None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise SweepLockedError(
                f"another `andrea sweep` is running on {self.path.parent} ({holder or 'pid unknown'}), or fits it "
                f"started are still running; wait for them or stop them (lock: {self.path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} since {_now()}".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Runner:
    """Runs planned fits with at most ``jobs`` at once and prints one line per run."""

    def __init__(self, specs: Sequence[RunSpec], jobs: int = 1, out: Optional[IO[str]] = None,
                 gpus: Optional[Sequence[str]] = None, cwd: Optional[Path] = None, poll_s: float = 0.2):
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        self.specs = list(specs)
        self.jobs = jobs
        self.out = out if out is not None else sys.stdout
        self.gpus = list(gpus) if gpus else None
        self.cwd = cwd
        self.poll_s = poll_s
        self.stopping = False
        self.running: dict[int, tuple[RunSpec, subprocess.Popen, float, IO[bytes]]] = {}

    # ------------------------------------------------------------ output

    def say(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=self.out, flush=True)

    @property
    def _inline(self) -> bool:
        """Sequential runs print their result on the line that announced them."""
        return self.jobs == 1

    # ------------------------------------------------------------ signals

    def _on_signal(self, signum, frame) -> None:
        if not self.stopping:
            self.stopping = True
            name = signal.Signals(signum).name
            self.say(f"\n{name}: stopping; {len(self.running)} running fit(s) are being stopped and will be rerun "
                     "by the next `andrea sweep`")
        for _, process, _, _ in self.running.values():
            if process.poll() is None:
                try:
                    process.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    # ------------------------------------------------------------ running

    def _env(self, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        if self.jobs > 1 and "OMP_NUM_THREADS" not in env:
            # N fits on one CPU: share the cores instead of each fit taking all of them.
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.jobs))
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        return env

    def _start(self, spec: RunSpec, slot: int, lock_fd: Optional[int]) -> None:
        state = run_state(spec.run_dir)
        if state in ("interrupted", "failed"):
            aside = move_aside(spec.run_dir, "failed" if state == "failed" else "interrupted")
            self.say(f"{spec.counter} {spec.label}: unfinished run directory moved aside to {aside.name}")
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(spec.run_dir / START_MARKER, {
            "schema": 1, "suite": spec.suite, "suite_file": spec.suite_file, "variant": spec.variant,
            "variant_index": spec.variant_index,
            "lr": spec.lr, "seed": spec.seed, "data_seed": spec.seed, "overrides": spec.overrides,
            "command": list(spec.command), "started": _now(), "sweep_pid": os.getpid(),
        })
        log = (spec.run_dir / LOG_FILE).open("wb")
        process = subprocess.Popen(spec.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=self.cwd, env=self._env(slot),
                                   pass_fds=(lock_fd,) if lock_fd is not None else ())
        self.running[slot] = (spec, process, time.monotonic(), log)
        self.say(f"{spec.counter} {spec.label} ...", end=" " if self._inline else " started\n")

    def _finish(self, slot: int) -> Outcome:
        spec, process, started, log = self.running.pop(slot)
        log.close()
        seconds = time.monotonic() - started
        code = process.returncode
        record = read_record(spec.run_dir)
        status = None if record is None else record.status
        prefix = "" if self._inline else f"{spec.counter} {spec.label} ... "
        if self.stopping:
            self.say(f"{prefix}stopped after {seconds:.0f} s")
            return Outcome(spec, "stopped", seconds, returncode=code)
        if (code == 0 and status != "interrupted") or status == "diverged":
            state = status if status in DONE_STATES else "finished"
            val = None if record is None else record.headline_loss
            write_json_atomic(spec.run_dir / DONE_MARKER, {
                "schema": 1, "status": state, "returncode": code, "finished": _now(), "wall_time_s": round(seconds, 1),
                "final_val_loss": val, "last_ckpt": (spec.run_dir / "checkpoints" / "last.ckpt").is_file(),
            })
            what = "done" if state == "finished" else "diverged"
            self.say(f"{prefix}{what} in {seconds:.0f} s, val {_fmt_loss(val)}")
            return Outcome(spec, state, seconds, val, code)
        reason = f"exit status {code}" + (f", summary.json status {status!r}" if status else "")
        write_json_atomic(spec.run_dir / FAILED_MARKER, {"schema": 1, "returncode": code, "summary_status": status,
                                                   "finished": _now(), "wall_time_s": round(seconds, 1)})
        self.say(f"{prefix}FAILED ({reason}) after {seconds:.0f} s; log: {spec.run_dir / LOG_FILE}")
        return Outcome(spec, "failed", seconds, returncode=code, detail=reason)

    def run(self, lock_fd: Optional[int] = None) -> list[Outcome]:
        outcomes: list[Outcome] = []
        queue: deque[RunSpec] = deque()
        for spec in self.specs:
            state = run_state(spec.run_dir)
            if state in DONE_STATES:
                val = final_val_loss(spec.run_dir)
                self.say(f"{spec.counter} {spec.label} ... skipped ({state} before, val {_fmt_loss(val)})")
                outcomes.append(Outcome(spec, "skipped", val_loss=val, detail=state))
            else:
                queue.append(spec)
        handlers = {}
        if hasattr(signal, "SIGTERM") and _in_main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, self._on_signal)
        try:
            while queue or self.running:
                while queue and not self.stopping and len(self.running) < self.jobs:
                    slot = min(set(range(self.jobs)) - set(self.running))
                    self._start(queue.popleft(), slot, lock_fd)
                for slot in [s for s, (_, p, _, _) in self.running.items() if p.poll() is not None]:
                    outcomes.append(self._finish(slot))
                if self.running:
                    time.sleep(self.poll_s)
                if self.stopping:
                    queue.clear()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            for _, process, _, log in self.running.values():  # only on an unexpected error
                process.kill()
                log.close()
        order = {spec.index: n for n, spec in enumerate(self.specs)}
        return sorted(outcomes, key=lambda o: order[o.spec.index])


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def report(outcomes: Sequence[Outcome], out: Optional[IO[str]] = None) -> None:
    """The end-of-sweep summary: counts, then every failed run with the end of its log."""
    out = out if out is not None else sys.stdout
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.state] = counts.get(outcome.state, 0) + 1
    order = ("finished", "diverged", "skipped", "failed", "stopped")
    parts = [f"{counts[state]} {state}" for state in order if counts.get(state)]
    print(f"\n{len(outcomes)} runs: {', '.join(parts) or 'none'}", file=out)
    failed = [o for o in outcomes if o.failed]
    for outcome in failed:
        log = outcome.spec.run_dir / LOG_FILE
        print(f"\nFAILED {outcome.spec.label} ({outcome.detail}); {log}:", file=out)
        tail = _tail(log)
        if tail:
            print("    " + tail.replace("\n", "\n    "), file=out)
    if counts.get("stopped"):
        print("stopped runs are rerun (their directories moved aside) by the next `andrea sweep` of this suite",
              file=out)
    out.flush()
