"""The warm worker: a process that imports torch and Lightning once and forks every fit from itself.

A fit in a fresh process spends seconds importing torch, Lightning and andrea_lab, and more walking and
hashing its corpus, before its first step; at the suites' scale that is a large share of a run. This
worker pays for both once (``python -m andrea_lab.experiments.sweep.warm_worker``), then runs each fit it is handed in
a child forked from itself: the child starts with everything imported and the corpus resolved, runs the
command as ``python`` would (``-m module`` through :mod:`runpy`, ``-c code``), and exits.

Forking per run, rather than running fits one after another in the worker itself, keeps what a fresh
process guarantees: no state of one fit (RNG, globals, threads, signal handlers, a crash) reaches the
next, so a fit gives the same numbers as in a fresh process (tests/experiments/sweep/test_warm_executor.py) and a
fit that crashes takes only its own child with it. The worker computes nothing itself before it forks
(no OpenMP pool exists to be inherited half-alive), and a child whose worker dies gets SIGTERM from the
kernel, so it checkpoints as if preempted.

Protocol, one JSON object per line: the worker prints ``{"ready": ...}`` once warm; each request on its
stdin ``{"argv": [...], "log": PATH, "cwd": PATH|null}`` is answered with ``{"started": PID}`` and later
``{"ended": PID, "returncode": N}`` (negative: killed by that signal). End of stdin ends the worker.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, Optional, Sequence

from andrea_lab.data.corpus import remember_resolved_corpora, resolve_corpus
from andrea_lab.experiments.sweep.ray_executor import _die_with_parent

#: Imported before any fork: what every ``andrea fit`` needs (torch, Lightning, andrea_lab's CLI).
WARM_MODULES = ("andrea_lab.cli", "andrea_lab.fit.cli")


def warm_up(corpora: Sequence[tuple[str, str]], modules: Sequence[str] = WARM_MODULES) -> dict[str, Any]:
    """Import what fits need and resolve the corpora they read; returns what it took, for the ready line."""
    import importlib

    started = time.perf_counter()
    for name in modules:
        importlib.import_module(name)
    imported = time.perf_counter()
    remember_resolved_corpora()
    for spec, text_field in corpora:
        try:
            resolve_corpus(spec, text_field).fingerprint()
        except Exception:  # the fit itself reports a bad corpus, in its own log
            pass
    import threading

    torch = sys.modules.get("torch")
    return {
        "ready": True,
        "pid": os.getpid(),
        "import_s": round(imported - started, 3),
        "corpora_s": round(time.perf_counter() - imported, 3),
        "threads": threading.active_count(),
        # CUDA cannot be used in a child forked after it was initialised: such a worker execs instead.
        "cuda_initialized": bool(torch is not None and torch.cuda.is_initialized()),
    }


def _same_python(executable: str) -> bool:
    try:
        return os.path.samefile(executable, sys.executable)
    except OSError:
        return executable == sys.executable


def run_command(argv: Sequence[str], warm: bool = True) -> int:
    """Run ``argv`` in this (forked) process as ``python`` would; the exit status. Another interpreter,
    Python options this does not mimic, or ``warm`` false are exec'ed instead: still isolated, only not warm."""
    import runpy

    if argv[1:2] == ["-P"] and sys.flags.safe_path:  # this worker runs with -P itself (warm_executor)
        argv = [argv[0], *argv[2:]]
    if warm and len(argv) >= 3 and _same_python(argv[0]) and argv[1] in ("-m", "-c"):
        try:
            if argv[1] == "-m":
                sys.argv = [argv[2], *argv[3:]]
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
            else:
                sys.argv = ["-c", *argv[3:]]
                exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            return 0
        except SystemExit as exc:
            return _exit_status(exc.code)
        except BaseException:  # as an uncaught exception ends `python`: traceback, status 1
            import traceback

            traceback.print_exc()
            return 1
    os.execv(argv[0], list(argv))
    return 127  # pragma: no cover - execv does not return


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(request: dict[str, Any], out: Any, warm: bool) -> None:  # pragma: no cover - runs in the forked child
    """Become the fit: default signals (SIGINT stays ignored, as for a sweep's fits), the run's directory,
    its log as stdout and stderr; then run and exit without returning into the worker's loop. The reply
    pipe is closed here, so that the sweep sees the worker's end even while a child lives on."""
    code = 1
    try:
        os.close(out.fileno())
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _die_with_parent()
        if request.get("cwd"):
            os.chdir(request["cwd"])
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        code = run_command(request["argv"], warm)
        _shut_down()
    finally:
        os._exit(code)


def _shut_down() -> None:  # pragma: no cover - runs in the forked child
    """What ``python`` does at exit: wait for non-daemon threads, run atexit handlers, flush."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def reply(message: dict[str, Any], out: Any) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def serve(requests: Any, out: Any, warm: bool = True) -> None:
    """Fork one child per request, one at a time, and report its pid and exit status (``warm`` false: each
    child execs its command in a fresh interpreter)."""
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            _child(request, out, warm)
        reply({"started": pid}, out)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        reply({"ended": pid, "returncode": code}, out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m andrea_lab.experiments.sweep.warm_worker [CORPORA_JSON [MODULES_JSON]]``: warm up (the corpora as
    ``[[spec, text_field], ...]``; the modules default :data:`WARM_MODULES`), then serve stdin until it closes."""
    argv = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep stops its fits with SIGTERM, not the terminal
    corpora = [tuple(item) for item in json.loads(argv[0])] if argv else []
    modules = json.loads(argv[1]) if len(argv) > 1 else WARM_MODULES
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed to stdout would corrupt the protocol
    ready = warm_up(corpora, modules)
    reply(ready, out)
    serve(sys.stdin, out, warm=not ready["cuda_initialized"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
