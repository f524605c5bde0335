"""Running a planned sweep: one ``andrea fit`` process per run, N at a time, resumable.

Per run directory the sweep writes ``sweep-run.json`` (what and how, and which executor, when the fit
starts), ``sweep.log`` (the fit's stdout and stderr), then ``sweep-done.json`` once the fit exited 0, or
``sweep-failed.json`` if it did not. The runs go through an executor (:mod:`andrea_lab.experiments.sweep.executors`:
local subprocesses or Ray tasks); the rule below is the same for both. Finished runs are skipped; a run
whose last attempt was preempted (SIGTERM/SIGUSR1: it wrote ``checkpoints/preempted.ckpt`` and exited
with status 4) continues from that checkpoint in its own directory; any other unfinished directory
(a fit killed outright, a failed fit) is moved aside — never deleted — and the run starts again.

One sweep at a time per suite directory: ``<runs-dir>/<suite>/.sweep.lock`` is held with ``flock`` by the
sweep *and* inherited by the fits it starts, so a fit that outlives its sweep (the sweep was killed with
SIGKILL or SIGTERM without its process group) still blocks a second sweep from moving its directory aside.

On SIGINT/SIGTERM the sweep starts nothing new, sends SIGTERM to its running fits (they checkpoint and
exit), waits for them and writes no done marker for them: the next sweep resumes them.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional, Sequence

from andrea_lab.errors import PreemptedError
from andrea_lab.experiments.sweep.executors import Ended, Executor, LocalExecutor, now
from andrea_lab.experiments.sweep.plan import RunSpec
from andrea_lab.files import open_new_or_own, write_json_atomic
from andrea_lab.runs.directory import (
    DONE_MARKER,
    DONE_STATES,
    FAILED_MARKER,
    LOCK_FILE,
    LOG_FILE,
    move_aside,
    preempted_checkpoint,
    read_record,
    run_state,
)
from andrea_lab.runs.heldout_names import scored_form

#: ``andrea fit``'s exit status after a SIGTERM/SIGUSR1 with its checkpoint written.
PREEMPTED_EXIT_STATUS = PreemptedError.exit_status
#: How often one sweep resumes a run that keeps being preempted before it leaves it to the next sweep.
MAX_PREEMPTIONS = 3

try:  # POSIX only; elsewhere sweeps are simply not locked
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


class SweepLockedError(RuntimeError):
    """Another sweep (or a fit it started) is using the same suite directory."""


@dataclass
class Outcome:
    spec: RunSpec
    state: str  # skipped | finished | diverged | failed | preempted | stopped
    seconds: Optional[float] = None
    val_loss: Optional[float] = None
    returncode: Optional[int] = None
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.state == "failed"


def _fmt_loss(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if math.isfinite(value) else str(value)


def loss_words(record) -> str:
    """A run's loss as a sweep line names it: ``held-out (document-weighted) 5.72``, the score ``andrea compare``
    ranks (``held-out (token-weighted) 5.69`` in a record without it; :mod:`andrea_lab.runs.heldout_names`), else
    (no held-out evaluation) ``val 5.49``, the in-training validation loss: one name per quantity, as in the fit's
    closing line and compare's tables."""
    if record is None or record.headline_loss is None:
        return "loss n/a"
    heldout = record.heldout
    if heldout is None or heldout.loss is None:
        return f"val {_fmt_loss(record.headline_loss)}"
    form, loss = scored_form(heldout.document_loss, heldout.loss)
    return f"held-out ({form}) {_fmt_loss(loss)}"


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
        fd = open_new_or_own(self.path, os.O_RDWR | os.O_CREAT)  # never a link to a user's file
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise SweepLockedError(
                f"another `andrea sweep` is running on {self.path.parent} ({holder or 'pid unknown'}), or fits it "
                f"started are still running; wait for them or stop them (lock: {self.path})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} since {now()}".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Runner:
    """Runs planned fits through an executor, at most ``jobs`` at once, and prints one line per run."""

    def __init__(
        self,
        specs: Sequence[RunSpec],
        jobs: int = 1,
        out: Optional[IO[str]] = None,
        gpus: Optional[Sequence[str]] = None,
        cwd: Optional[Path] = None,
        poll_s: float = 0.2,
        executor: Optional[Executor] = None,
        extension: Optional[Callable[[list[RunSpec], Callable[[str], None]], list[RunSpec]]] = None,
    ):
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        self.specs = list(specs)
        self.jobs = jobs
        self.out = out if out is not None else sys.stdout
        self.executor = executor if executor is not None else LocalExecutor(jobs, gpus, cwd)
        self.poll_s = poll_s
        self.stopping = False
        self.running: dict[int, tuple[RunSpec, Any, float]] = {}
        self.preemptions: dict[int, int] = {}
        #: Called with every run planned so far once none is left: more runs to do (the suite's extend_grid,
        #: andrea_lab.experiments.sweep.grid_extension), or [] to end.
        self.extension = extension

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
            name = signal.Signals(signum).name
            self.say(
                f"\n{name}: stopping; {len(self.running)} running fit(s) write a checkpoint and stop, and "
                "the next `andrea sweep` resumes them"
            )
        self.stop()

    def stop(self) -> None:
        """Start nothing new and stop the running fits as if preempted (they checkpoint, then exit)."""
        self.stopping = True
        for _, handle, _ in self.running.values():
            self.executor.stop(handle)

    # ------------------------------------------------------------ running

    def _prepare(self, spec: RunSpec) -> Optional[Path]:
        """Apply the resume rule to an unfinished directory: a run whose last attempt was preempted continues
        from its checkpoint (returned); any other unfinished one is moved aside and starts again."""
        state = run_state(spec.run_dir)
        if state not in ("interrupted", "failed"):
            return None
        checkpoint = preempted_checkpoint(spec.run_dir)
        if checkpoint is not None:
            (spec.run_dir / FAILED_MARKER).unlink(missing_ok=True)  # it described the attempt resumed now
            self.say(f"{spec.counter} {spec.label}: resuming from {checkpoint}")
            return checkpoint
        aside = move_aside(spec.run_dir, "failed" if state == "failed" else "interrupted")
        self.say(f"{spec.counter} {spec.label}: unfinished run directory moved aside to {aside.name}")
        return None

    def _start(self, spec: RunSpec, slot: int) -> None:
        checkpoint = self._prepare(spec)
        command = list(spec.command) + (["--ckpt_path", str(checkpoint)] if checkpoint else [])
        marker = {
            "schema": 1,
            "suite": spec.suite,
            "suite_file": spec.suite_file,
            "variant": spec.variant,
            "variant_index": spec.variant_index,
            "lr": spec.lr,
            "seed": spec.seed,
            "data_seed": spec.seed,
            "overrides": spec.overrides,
            "command": command,
            "executor": self.executor.name,
            "resumed_from": str(checkpoint) if checkpoint else None,
            "sweep_pid": os.getpid(),
        }
        if (
            spec.scale is not None
        ):  # a suite's scale axis (andrea_lab.experiments.sweep.scales); `andrea compare` reads it
            marker.update(scale=spec.scale, scale_index=spec.scale_index)
        if spec.search_step is not None:  # the search step that planned it (sweep.search_runs)
            marker.update(search_step=spec.search_step)
        handle = self.executor.launch(spec.run_dir, command, marker, slot)
        self.running[slot] = (spec, handle, time.monotonic())
        self.say(f"{spec.counter} {spec.label} ...", end=" " if self._inline else f" {self.executor.launched}\n")

    def _finish(self, slot: int, ended: Ended) -> Outcome:
        spec, _, started = self.running.pop(slot)
        seconds = time.monotonic() - started
        code = ended.returncode
        record = read_record(spec.run_dir)
        status = None if record is None else record.status
        prefix = "" if self._inline else f"{spec.counter} {spec.label} ... "
        if self.stopping:
            self.say(f"{prefix}stopped after {seconds:.0f} s")
            return Outcome(spec, "stopped", seconds, returncode=code)
        if (code == 0 and status != "interrupted") or status == "diverged":
            return self._done(spec, prefix, seconds, code, record)
        preempted = code == PREEMPTED_EXIT_STATUS or (code is None and preempted_checkpoint(spec.run_dir))
        reason = (f"exit status {code}" if code is not None else ended.detail or "lost by its executor") + (
            f", summary.json status {status!r}" if status else ""
        )
        write_json_atomic(
            spec.run_dir / FAILED_MARKER,
            {
                "schema": 1,
                "returncode": code,
                "summary_status": status,
                "preempted": bool(preempted),
                "executor": self.executor.name,
                "finished": now(),
                "wall_time_s": round(seconds, 1),
            },
        )
        if preempted:
            self.say(f"{prefix}preempted after {seconds:.0f} s ({reason}); resumes from its checkpoint")
            return Outcome(spec, "preempted", seconds, returncode=code, detail=reason)
        self.say(f"{prefix}FAILED ({reason}) after {seconds:.0f} s; log: {spec.run_dir / LOG_FILE}")
        return Outcome(spec, "failed", seconds, returncode=code, detail=reason)

    def _done(self, spec: RunSpec, prefix: str, seconds: float, code: Optional[int], record) -> Outcome:
        state = record.status if record is not None and record.status in DONE_STATES else "finished"
        val = None if record is None else record.headline_loss
        write_json_atomic(
            spec.run_dir / DONE_MARKER,
            {
                "schema": 1,
                "status": state,
                "returncode": code,
                "finished": now(),
                "wall_time_s": round(seconds, 1),
                "heldout_loss": None if record is None or record.heldout is None else record.heldout.loss,
                "last_ckpt": (spec.run_dir / "checkpoints" / "last.ckpt").is_file(),
                "executor": self.executor.name,
            },
        )
        what = "done" if state == "finished" else "diverged"
        self.say(f"{prefix}{what} in {seconds:.0f} s, {loss_words(record)}")
        return Outcome(spec, state, seconds, val, code)

    def _pending(self, specs: Optional[Sequence[RunSpec]] = None) -> deque[RunSpec]:
        """The runs still to do (of ``specs``, default all); finished ones are reported as skipped (into
        ``self.outcomes``)."""
        queue: deque[RunSpec] = deque()
        for spec in self.specs if specs is None else specs:
            state = run_state(spec.run_dir)
            if state in DONE_STATES:
                record = read_record(spec.run_dir)
                val = None if record is None else record.headline_loss
                self.say(f"{spec.counter} {spec.label} ... skipped ({state} before, {loss_words(record)})")
                self.outcomes.append(Outcome(spec, "skipped", val_loss=val, detail=state))
            else:
                queue.append(spec)
        return queue

    def _collect(self, queue: deque[RunSpec]) -> None:
        """Record every run that ended; a preempted one goes back in the queue (up to MAX_PREEMPTIONS times)."""
        for slot, (spec, handle, _) in list(self.running.items()):
            ended = self.executor.poll(handle)
            if ended is None:
                continue
            outcome = self._finish(slot, ended)
            count = self.preemptions.get(spec.index, 0)
            if outcome.state == "preempted" and count < MAX_PREEMPTIONS and not self.stopping:
                self.preemptions[spec.index] = count + 1
                queue.append(spec)
            else:
                self.outcomes.append(outcome)

    def _extended(self, queue: deque[RunSpec]) -> bool:
        """With nothing left to run: the extension's runs added to the plan and queued; False when it adds none."""
        if self.extension is None or self.stopping:
            return False
        more = self.extension(list(self.specs), self.say)
        self.specs += more
        queue.extend(self._pending(more))
        return bool(more)

    def run(self) -> list[Outcome]:
        self.executor.check_storage(self.specs[0].run_dir.parent.parent if self.specs else Path("."))
        self.outcomes: list[Outcome] = []
        queue = self._pending()
        handlers = {}
        if hasattr(signal, "SIGTERM") and _in_main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, self._on_signal)
        try:
            while queue or self.running or self._extended(queue):
                while queue and not self.stopping and len(self.running) < self.jobs:
                    slot = min(set(range(self.jobs)) - set(self.running))
                    self._start(queue.popleft(), slot)
                self._collect(queue)
                if self.running:
                    time.sleep(self.poll_s)
                if self.stopping:
                    queue.clear()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            for _, handle, _ in self.running.values():  # only on an unexpected error
                self.executor.kill(handle)
            close = getattr(self.executor, "close", None)  # executors that keep workers end them here
            if close is not None:
                close()
        order = {spec.index: n for n, spec in enumerate(self.specs)}
        return sorted(self.outcomes, key=lambda o: order[o.spec.index])


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def report(outcomes: Sequence[Outcome], out: Optional[IO[str]] = None) -> None:
    """The end-of-sweep summary: counts, then every failed run with the end of its log."""
    out = out if out is not None else sys.stdout
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.state] = counts.get(outcome.state, 0) + 1
    order = ("finished", "diverged", "skipped", "failed", "preempted", "stopped")
    parts = [f"{counts[state]} {state}" for state in order if counts.get(state)]
    print(f"\n{len(outcomes)} runs: {', '.join(parts) or 'none'}", file=out)
    failed = [o for o in outcomes if o.failed]
    for outcome in failed:
        log = outcome.spec.run_dir / LOG_FILE
        print(f"\nFAILED {outcome.spec.label} ({outcome.detail}); {log}:", file=out)
        tail = _tail(log)
        if tail:
            print("    " + tail.replace("\n", "\n    "), file=out)
    if counts.get("stopped") or counts.get("preempted"):
        print(
            "stopped and preempted runs are resumed from their checkpoints by the next `andrea sweep` of this "
            "suite (a run stopped before it could write one is moved aside and rerun)",
            file=out,
        )
    out.flush()
