"""One prepared check of the CUDA backend and of ANDREA-120M training on one GPU, in about 5 minutes.

    python benchmarks/gpu_check.py --out gpu-check            # on the GPU machine ($OUT when set)
    python benchmarks/gpu_check.py --dry-run --out /tmp/dry   # anywhere: everything but the GPU work

It runs each part below in a process of its own with a time cap, in this order, and writes
``gpu_check.json`` (every part's section: status, times, command, result), ``gpu_check.md`` (the same
as a readable summary) and ``gpu_check_logs.tar.gz`` (each part's full output) into the output
directory. A part that fails, crashes or runs past its cap (its whole process group is stopped) is
reported as such and the rest go on; a part whose Python package is missing (jsonargparse on a bare
GPU machine) or whose tool is refused (``compute-sanitizer`` under some container runtimes) is
reported with that as its outcome. The whole run keeps to ``--budget-s``: a part that would start
after it is reported as not run.

Parts: environment (driver, nvcc, torch, device; builds the kernels), gpu_tests (``pytest -m gpu``
with ANDREA_REQUIRE_GPU=1: a skip is a failure), sanitizer_memcheck / sanitizer_racecheck
(``compute-sanitizer`` over LayerNorm and RMSNorm forward/backward with rows >> grid at d = 768 and 8192,
strided SwiGLU, GELU and ReLU tails), kernels_bf16 / kernels_fp32 (``benchmarks/kernel_bandwidth.py``:
bandwidth as a fraction of a measured copy), fit_cuda_vs_torch (200 steps of ANDREA-120M on a
token file with each backend, loss curves compared), throughput_eager / throughput_compiled
(``benchmarks/throughput.py``: (a) Lightning, (b) bare, (c) HF GPT-2, bf16, MFU against the
measured bf16 matmul peak). docs/kernels.md explains every section of the JSON.

``--dry-run`` runs the environment part for real and, for every other part, a CPU stand-in of its
command (collect the GPU tests, list the sanitizer cases, ``--help`` of the benchmarks, parse the
fit command lines), so that the check cannot rot where there is no GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is a package of the repository, not installed
    sys.path.insert(0, str(ROOT))
from benchmarks.gpu_check_parts import Part, read_exit_status  # noqa: E402
from benchmarks.gpu_check_plan import plan  # noqa: E402

DEFAULT_BUDGET_S = 300.0
#: Seconds left for the stopped process group to exit after SIGTERM before SIGKILL.
KILL_GRACE_S = 5.0
LOG_TAIL_CHARS = 3000
#: The statuses of a part that passed.
GOOD = {"ok", "dry_run"}


@dataclass
class Section:
    """What the report says about one part."""

    name: str
    what: str
    status: str  # ok | failed | timeout | missing_package | unavailable | refused | not_run | dry_run
    cap_s: float
    wall_s: float = 0.0
    returncode: int | None = None
    command: list[str] = field(default_factory=list)
    reason: str = ""
    headline: str = ""
    result: dict = field(default_factory=dict)
    log_tail: str = ""


# -- running one part ---------------------------------------------------------------------------------
def run_capped(argv: list[str], cap_s: float, log_path: Path, env: dict[str, str]) -> tuple[int | None, float]:
    """Run ``argv`` with output to ``log_path``; after ``cap_s`` seconds stop its whole process group.

    Returns (exit status, or None when it was stopped at the cap; wall seconds).
    """
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
        )  # its own group: the cap stops its children too
        try:
            code: int | None = proc.wait(timeout=max(cap_s, 0.1))
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            code = None
    return code, time.monotonic() - start


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the whole group, up to KILL_GRACE_S for the leader to exit, then SIGKILL to whatever
    of the group is left (a child that ignored SIGTERM included)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if sig == signal.SIGTERM:
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
    proc.wait()


def _missing(part: Part) -> tuple[str, str] | None:
    """(status, reason) when the part cannot start here: a Python package or its tool is missing."""
    for module in part.needs:
        if importlib.util.find_spec(module) is None:
            return "missing_package", (
                f"the Python package {module!r} is not installed for {sys.executable}; carry "
                f"it as a wheel (docs/kernels.md, 'Running it on the GPU machine')"
            )
    if part.tool and shutil.which(part.tool) is None:
        return "unavailable", f"{part.tool} not found (looked on PATH and beside nvcc)"
    return None


def run_part(part: Part, work: Path, remaining_s: float) -> Section:
    """Run one part within its cap and what is left of the budget, and read its outcome."""
    section = Section(part.name, part.what, "not_run", part.cap_s, command=part.argv)
    missing = _missing(part)
    if missing:
        section.status, section.reason = missing
        return section
    if remaining_s < 1.0:
        section.reason = "not started: the run's time budget was spent"
        return section
    cap = min(part.cap_s, remaining_s)
    log_path = work / f"{part.name}.log"
    code, section.wall_s = run_capped(part.argv, cap, log_path, part.env)
    section.returncode = code
    log = log_path.read_text(errors="replace")
    section.log_tail = log[-LOG_TAIL_CHARS:]
    if code is None:
        section.status = "timeout"
        section.reason = (
            f"stopped after {cap:.0f} s (its cap is {part.cap_s:.0f} s"
            f"{', cut to what was left of the budget' if cap < part.cap_s else ''})"
        )
        return section
    section.status, section.result = (part.read or read_exit_status)(part, code, log)
    if section.status not in GOOD and not section.reason:
        section.reason = section.result.pop("reason", f"exit status {code}")
    section.headline = _headline(part, section)
    return section


def _headline(part: Part, section: Section) -> str:
    if part.brief is None or not section.result:
        return section.reason or ("the CPU stand-in of its command ran" if section.status == "dry_run" else "")
    try:
        return part.brief(section.result)
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # a result without the expected fields
        return f"{section.reason} (no summary: {type(exc).__name__} {exc})".strip()


# -- running everything, and the report ---------------------------------------------------------------
def run_all(parts: list[Part], work: Path, budget_s: float) -> list[Section]:
    """Run the parts in order, each within its cap and what is left of ``budget_s``."""
    start = time.monotonic()
    sections = []
    for part in parts:
        print(f"[gpu_check] {part.name}: {part.what} (cap {part.cap_s:.0f} s)", flush=True)
        section = run_part(part, work, budget_s - (time.monotonic() - start))
        print(f"[gpu_check] {part.name}: {section.status} after {section.wall_s:.1f} s; {section.headline}", flush=True)
        sections.append(section)
    return sections


def build_report(sections: list[Section], dry_run: bool, budget_s: float, started: float, wall_s: float) -> dict:
    return {
        "schema": 1,
        "mode": "dry_run" if dry_run else "gpu",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_s": round(wall_s, 1),
        "budget_s": budget_s,
        "ok": all(s.status in GOOD for s in sections),
        "statuses": {s.name: s.status for s in sections},
        "parts": {s.name: asdict(s) for s in sections},
    }


def summary_markdown(report: dict) -> str:
    """The readable summary: one row per part, then each part's reason when it did not pass."""
    env = report["parts"].get("environment", {})
    lines = [
        f"# GPU check ({report['mode']}), {report['started']}, {report['wall_s']:.0f} s of a "
        f"{report['budget_s']:.0f} s budget: {'all parts passed' if report['ok'] else 'NOT all parts passed'}",
        "",
        f"Environment: {env.get('headline', 'not recorded')}",
        "",
        "| part | status | seconds (cap) | outcome |",
        "| --- | --- | --- | --- |",
    ]
    for name, s in report["parts"].items():
        outcome = (s["headline"] or s["reason"]).replace("|", "/").replace("\n", " ")
        lines.append(f"| {name} | {s['status']} | {s['wall_s']:.0f} ({s['cap_s']:.0f}) | {outcome} |")
    failed = [(name, s) for name, s in report["parts"].items() if s["status"] not in GOOD]
    for name, s in failed:
        lines += [
            "",
            f"## {name}: {s['status']}",
            "",
            s["reason"] or "(no reason given)",
            "",
            "```",
            s["log_tail"][-1500:].rstrip(),
            "```",
        ]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, report: dict, work: Path) -> list[Path]:
    """gpu_check.json, gpu_check.md and gpu_check_logs.tar.gz (each part's log and files) in ``out``."""
    from andrea_lab.files import atomic_write, write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "gpu_check.json", out / "gpu_check.md", out / "gpu_check_logs.tar.gz"]
    write_json_atomic(paths[0], report)
    atomic_write(paths[1], lambda handle: handle.write(summary_markdown(report).encode()))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted([*work.glob("*.log"), *work.glob("*.json"), *work.glob("*.xml"), *work.glob("fit/*.log")]):
            if path.stat().st_size < 16 << 20:
                tar.add(path, arcname=str(path.relative_to(work)))
    atomic_write(paths[2], lambda handle: handle.write(buffer.getvalue()))
    return paths


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="docs/kernels.md: the GPU machine's command and what the JSON means",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default: $OUT when set, else ./gpu-check)"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="scratch directory for the parts (default: a new temporary one; kept)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds for the whole run (default {DEFAULT_BUDGET_S:.0f}); parts after it are not run",
    )
    parser.add_argument("--parts", default="", help="comma-separated subset of the parts, in the usual order")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: CPU stand-ins of every GPU part")
    return parser.parse_args(argv)


def select(parts: list[Part], wanted: str) -> list[Part]:
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = sorted(set(names) - {p.name for p in parts})
    if unknown:
        print(
            f"benchmarks/gpu_check.py: unknown parts {', '.join(unknown)}; valid: {', '.join(p.name for p in parts)}",
            file=sys.stderr,
        )
        sys.exit(2)
    return [p for p in parts if p.name in names] if names else parts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or Path(os.environ.get("OUT") or "gpu-check")
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    parts = select(plan(work.resolve(), args.dry_run), args.parts)
    started, clock = time.time(), time.monotonic()
    sections = run_all(parts, work.resolve(), args.budget_s)
    report = build_report(sections, args.dry_run, args.budget_s, started, time.monotonic() - clock)
    paths = write_outputs(out, report, work)
    print("\n" + summary_markdown(report).split("\n## ")[0])
    print(f"wrote {', '.join(map(str, paths))}; scratch files in {work}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
