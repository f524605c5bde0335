"""How long each ``andrea`` command takes to answer ``--help``, and what it imports to do so, in one run.

    python benchmarks/command_startup.py              # every command, 3 repeats each, the median
    python benchmarks/command_startup.py --repeats 5 compare heldout

Issue 60 asks that commands start in about a second. Each command's ``--help`` is run in a fresh interpreter
(``python -m andrea_lab.cli <command> --help``), wall-clock timed; beside it, ``python -c pass`` (the interpreter
alone) and the heavy libraries the help loaded (read from ``sys.modules`` in a second, untimed run). Times are
this machine's, now: compare them only as ratios within one run (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

HEAVY = ("torch", "lightning", "pandas", "scipy", "matplotlib", "tokenizers")
PROBE = """
import contextlib, io, json, sys
from andrea_lab.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(sys.argv[1:])
print(json.dumps([name for name in {heavy!r} if name in sys.modules]))
"""


def seconds(command: list[str], repeats: int) -> float:
    """The median wall time of ``command`` over ``repeats`` runs (output discarded)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def loaded(command: str) -> list[str]:
    probe = PROBE.format(heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe, command, "--help"], capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else []


def main(argv: list[str] | None = None) -> int:
    from andrea_lab.cli import LIGHTNING_COMMANDS, OWN_COMMANDS

    known = [*OWN_COMMANDS, *LIGHTNING_COMMANDS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", nargs="*", choices=[[], *known], help="default: every command")
    parser.add_argument("--repeats", type=int, default=3, help="runs per command, the median kept (default 3)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    base = seconds([sys.executable, "-c", "pass"], args.repeats)
    print(f"python -c pass: {base:.2f} s (median of {args.repeats})")
    print("| command | --help (s) | × python alone | heavy libraries loaded |")
    print("|---|---|---|---|")
    for command in args.commands or known:
        took = seconds([sys.executable, "-m", "andrea_lab.cli", command, "--help"], args.repeats)
        print(f"| {command} | {took:.2f} | {took / base:.1f} | {', '.join(loaded(command)) or 'none'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
