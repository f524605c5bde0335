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
(``compute-sanitizer`` over LayerNorm forward/backward with rows >> grid at d = 768 and 8192,
strided SwiGLU, GELU and ReLU tails), kernels_bf16 / kernels_fp32 (``benchmarks/kernels.py``:
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
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "benchmarks" / "gpu_check_workloads.py"
KERNELS = ROOT / "benchmarks" / "kernels.py"
THROUGHPUT = ROOT / "benchmarks" / "throughput.py"
DEFAULT_BUDGET_S = 300.0
#: Seconds left for the stopped process group to exit after SIGTERM before SIGKILL.
KILL_GRACE_S = 5.0
LOG_TAIL_CHARS = 3000
#: The statuses of a part that passed.
GOOD = {"ok", "dry_run"}


@dataclass
class Part:
    """One part of the check: a command with a time cap, and how to read what it produced."""

    name: str
    what: str
    argv: list[str]
    cap_s: float
    needs: tuple[str, ...] = ()  # Python modules the command imports: missing -> "missing_package"
    tool: str | None = None  # an executable the command runs: missing -> "unavailable"
    env: dict[str, str] = field(default_factory=dict)
    result_json: Path | None = None  # a JSON file the command writes, read into the section's "result"
    read: Callable[[Part, int | None, str], tuple[str, dict]] | None = None  # -> (status, result)
    brief: Callable[[dict], str] | None = None  # one line of the summary from the result


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
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                start_new_session=True)  # its own group: the cap stops its children too
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
            return "missing_package", (f"the Python package {module!r} is not installed for {sys.executable}; carry "
                                       f"it as a wheel (docs/kernels.md, 'Running it on the GPU machine')")
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
        section.reason = (f"stopped after {cap:.0f} s (its cap is {part.cap_s:.0f} s"
                          f"{', cut to what was left of the budget' if cap < part.cap_s else ''})")
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


# -- reading what each part produced -----------------------------------------------------------------
def _json_result(part: Part) -> dict:
    if part.result_json is None or not part.result_json.is_file():
        return {}
    try:
        return json.loads(part.result_json.read_text())
    except json.JSONDecodeError as exc:
        return {"reason": f"{part.result_json.name} is not valid JSON: {exc}"}


def read_exit_status(part: Part, code: int, log: str) -> tuple[str, dict]:
    result = _json_result(part)
    return ("ok" if code == 0 else "failed"), result


def read_dry_run(part: Part, code: int, log: str) -> tuple[str, dict]:
    return ("dry_run" if code == 0 else "failed"), _json_result(part)


def read_junit(part: Part, code: int, log: str) -> tuple[str, dict]:
    """Counts from pytest's JUnit XML; ok only with tests run and none failed, errored or skipped.

    A module skipped while collecting (``pytest.importorskip`` of an optional package at its top) is
    listed apart, as ``skipped_at_collection``: with ``-m gpu`` every module is collected, and such a
    skip says a package is missing, not that a gpu test was skipped.
    """
    counts = junit_counts(part.result_json) if part.result_json and part.result_json.is_file() else None
    if counts is None:
        return "failed", {"reason": f"pytest wrote no JUnit XML (exit status {code})"}
    ok = code == 0 and counts["passed"] > 0 and not (counts["failed"] or counts["errors"] or counts["skipped"])
    return ("ok" if ok else "failed"), counts


def junit_counts(path: Path) -> dict:
    """passed / failed / errors / skipped / skipped_at_collection, and the names of those not passed."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "skipped_at_collection": 0, "not_passed": []}
    for case in ET.parse(path).getroot().iter("testcase"):
        kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), None)
        message = next((child.get("message", "") for child in case if child.tag == kind), "")
        key = {"failure": "failed", "error": "errors", "skipped": "skipped", None: "passed"}[kind]
        if kind == "skipped" and message == "collection skipped":
            key = "skipped_at_collection"
            message = (next(child for child in case if child.tag == kind).text or "")
        counts[key] += 1
        if kind:
            counts["not_passed"].append(f"{case.get('classname')}::{case.get('name')}: {key}: {message[:300]}")
    return counts


#: compute-sanitizer's words when it cannot work on this device or under this runtime.
SANITIZER_REFUSALS = ("Device not supported", "not supported on this", "Unable to find injection library",
                      "Error: Target application terminated before first instrumented API call",
                      "error 999", "Failed to initialize")


def read_sanitizer(part: Part, code: int, log: str) -> tuple[str, dict]:
    summary = next((line.strip() for line in reversed(log.splitlines()) if "ERROR SUMMARY" in line), "")
    if code == 0 and summary.startswith("========= ERROR SUMMARY: 0 errors"):
        return "ok", {"summary": summary}
    if code == SANITIZER_ERROR_EXIT:
        return "failed", {"summary": summary, "reason": f"compute-sanitizer found errors: {summary}"}
    refusal = next((word for word in SANITIZER_REFUSALS if word in log), None)
    if refusal:
        return "refused", {"reason": f"compute-sanitizer cannot run here ({refusal!r} in its output)"}
    return "failed", {"summary": summary}


SANITIZER_ERROR_EXIT = 86


def read_kernels(part: Part, code: int, log: str) -> tuple[str, dict]:
    """Copy bandwidth, each op's fraction of it at its largest size, and the targets met or not."""
    data = _json_result(part)
    if code != 0 or "results" not in data:
        return "failed", data
    largest: dict[str, int] = {}
    for r in data["results"]:
        largest[r["op"]] = max(largest.get(r["op"], 0), r["elements"])
    fractions: dict[str, dict] = {}
    for r in data["results"]:
        if r["elements"] == largest[r["op"]]:
            fractions.setdefault(r["op"], {"elements": r["elements"]})[r["impl"]] = r["fraction_of_copy"]
    return "ok", {"device": data.get("device"), "copy_peak_gbps": data["copy_peak_gbps"],
                  "fraction_of_copy_at_largest": fractions, "targets": data.get("targets", [])}


def read_throughput(part: Part, code: int, log: str) -> tuple[str, dict]:
    """tokens/s, ms/step and MFU of each variant, the measured matmul peak, the (a)/(b) and (b)/(c) ratios."""
    data = _json_result(part)
    if code != 0 or "variants" not in data:
        return "failed", {}
    variants = {name: {key: v.get(key) for key in ("tokens_per_s", "ms_per_step", "mfu", "peak_memory_bytes")}
                for name, v in data["variants"].items() if isinstance(v, dict)}
    ratios = {name: (r or {}).get("pooled_median") for name, r in data.get("ratios", {}).items() if name != "ablations"}
    return "ok", {"variants": variants, "matmul_peak_flops_per_s": data["matmul_peak"]["flops_per_s"],
                  "ratios": ratios, "targets": data.get("targets", [])}


def read_fit(part: Part, code: int, log: str) -> tuple[str, dict]:
    data = _json_result(part)
    comparison = data.get("comparison")
    if comparison is None:
        return "failed", data
    status = "ok" if code == 0 else "failed"
    reason = "" if status == "ok" else (
        f"loss curves {'agree' if comparison['agree'] else 'differ'}, "
        f"{'both learned' if comparison['learned'] else 'a run did not learn'}")
    return status, {**data, **({"reason": reason} if reason else {})}


# -- one line per part for the summary ---------------------------------------------------------------
def brief_environment(r: dict) -> str:
    device = r.get("torch", {}).get("device", {})
    backend = r.get("cuda_backend", {})
    driver = r["driver"].get("driver_version") or r["driver"].get("error")
    return (f"{device.get('name', 'no CUDA device')}, driver {driver}, "
            f"{(r.get('toolchain') or {}).get('nvcc_version') or 'no nvcc'}, torch {r['torch']['version']} "
            f"(CUDA {r['torch']['cuda']}); cuda backend: "
            f"{'available' if backend.get('available') else 'NOT available: ' + backend.get('reason', '?')}")


def brief_tests(r: dict) -> str:
    return (f"{r['passed']} passed, {r['failed']} failed, {r['errors']} errors, {r['skipped']} skipped"
            + (f" ({r['skipped_at_collection']} modules skipped while collecting: see not_passed)"
               if r.get("skipped_at_collection") else ""))


def brief_sanitizer(r: dict) -> str:
    return r.get("summary") or "no ERROR SUMMARY line"


def brief_kernels(r: dict) -> str:
    ops = ", ".join(f"{op} {d['cuda']:.0%}" + (f" (eager {d['eager']:.0%})" if "eager" in d else "")
                    for op, d in r["fraction_of_copy_at_largest"].items() if "cuda" in d)
    return f"copy {r['copy_peak_gbps']:,.0f} GB/s; at the largest size, of copy: {ops}"


def brief_fit(r: dict) -> str:
    c = r["comparison"]
    return (f"{c['steps']} steps; loss {c['first']['cuda']:.3f} -> cuda {c['final']['cuda']:.3f} / torch "
            f"{c['final']['torch']:.3f}; mean |diff| last 20 steps {c['mean_abs_diff_last_20']:.4f} "
            f"(allowed {c['tolerance_last_20']}), max {c['max_abs_diff']:.4f}")


def brief_throughput(r: dict) -> str:
    rows = "; ".join(f"{name} {v['tokens_per_s']:,.0f} tok/s, MFU {v['mfu']:.1%}" for name, v in r["variants"].items()
                     if v.get("tokens_per_s"))
    return f"{rows} (bf16 matmul peak {r['matmul_peak_flops_per_s'] / 1e12:.0f} TFLOP/s)"


# -- the plan -----------------------------------------------------------------------------------------
def _sanitizer() -> str:
    """compute-sanitizer on PATH, else beside nvcc, else the toolkit's default place (may not exist)."""
    found = shutil.which("compute-sanitizer")
    nvcc = shutil.which("nvcc")
    beside = Path(nvcc).resolve().parent / "compute-sanitizer" if nvcc else None
    if found:
        return found
    return str(beside) if beside and beside.exists() else "/usr/local/cuda/bin/compute-sanitizer"


def _gpu_parts(work: Path, py: str) -> list[Part]:
    tests = Part("gpu_tests", "pytest -m gpu, ANDREA_REQUIRE_GPU=1 (a skip fails)",
                 [py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                  "--continue-on-collection-errors", f"--junitxml={work / 'gpu_tests.xml'}"], 90,
                 needs=("pytest", "andrea_lab_cuda"), env={"ANDREA_REQUIRE_GPU": "1"},
                 result_json=work / "gpu_tests.xml", read=read_junit, brief=brief_tests)
    sanitizers = [Part(f"sanitizer_{tool}", f"compute-sanitizer --tool {tool}: LayerNorm rows >> grid, SwiGLU, GELU",
                       [_sanitizer(), "--tool", tool, "--error-exitcode", str(SANITIZER_ERROR_EXIT), "--print-limit",
                        "50", py, str(WORKLOADS), "sanitize"], 45, needs=("andrea_lab_cuda",), tool=_sanitizer(),
                       read=read_sanitizer, brief=brief_sanitizer) for tool in ("memcheck", "racecheck")]
    kernels = [Part(f"kernels_{short}", f"benchmarks/kernels.py {dtype}: bandwidth as a fraction of a measured copy",
                    [py, str(KERNELS), "--dtype", dtype, "--min-log2", "20", "--max-log2", "26", "--step-log2", "2",
                     "--warmup", "2", "--reps", "10", "--no-compile", "--json", str(work / f"kernels_{short}.json")],
                    25, needs=("andrea_lab_cuda",), result_json=work / f"kernels_{short}.json", read=read_kernels,
                    brief=brief_kernels)
               for short, dtype in (("bf16", "bfloat16"), ("fp32", "float32"))]
    fit = Part("fit_cuda_vs_torch", "200 steps of ANDREA-120M, bf16, cuda vs torch backend: loss curves",
               [py, str(WORKLOADS), "fit-compare", "--work", str(work / "fit"), "--json", str(work / "fit.json"),
                "--steps", "200"], 160, needs=("jsonargparse", "tensorboard", "andrea_lab_cuda"),
               result_json=work / "fit.json", read=read_fit, brief=brief_fit)
    throughput = [Part(f"throughput_{mode}", f"benchmarks/throughput.py andrea-120m bf16 {mode}: (a) (b) (c), MFU",
                       [py, str(THROUGHPUT), "--preset", "andrea-120m", "--device", "cuda", "--precision", "bf16-mixed",
                        "--batch-size", "16", "--warmup", "5", "--steps", "10", "--rounds", "1", "--no-memory-pass",
                        "--json", str(work / f"throughput_{mode}.json"), *extra], cap, needs=("transformers",),
                       result_json=work / f"throughput_{mode}.json", read=read_throughput, brief=brief_throughput)
                  for mode, extra, cap in (("eager", [], 60), ("compiled", ["--compile"], 150))]
    return [tests, *sanitizers, *kernels, fit, *throughput]


def _as_dry_run(read: Callable) -> Callable:
    """A reader for a stand-in that writes the real output format: "dry_run" when the real reader is content."""
    def read_stand_in(part: Part, code: int, log: str) -> tuple[str, dict]:
        status, result = read(part, code, log)
        return ("dry_run" if status == "ok" else status), result
    return read_stand_in


def _dry_parts(gpu_parts: list[Part], work: Path, py: str) -> list[Part]:
    """The same parts, each running a CPU stand-in of its command that proves the command is sound: the
    GPU tests are collected, the sanitizer cases listed, the fit's command line parsed, the throughput
    benchmark run for one step of andrea-tiny on the CPU and its JSON read like the real one."""
    tiny = work / "throughput_eager.json"
    stand_ins = {
        "gpu_tests": ([py, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:randomly",
                       "-p", "no:cacheprovider"], None, read_dry_run),
        "sanitizer_memcheck": ([py, str(WORKLOADS), "sanitize", "--dry-run"], None, read_dry_run),
        "sanitizer_racecheck": ([py, str(WORKLOADS), "sanitize", "--dry-run"], None, read_dry_run),
        "kernels_bf16": ([py, str(KERNELS), "--help"], None, read_dry_run),
        "kernels_fp32": ([py, str(KERNELS), "--help"], None, read_dry_run),
        "fit_cuda_vs_torch": ([py, str(WORKLOADS), "fit-compare", "--work", str(work / "fit"), "--json",
                               str(work / "fit.json"), "--steps", "3", "--dry-run"], work / "fit.json", read_dry_run),
        "throughput_eager": ([py, str(THROUGHPUT), "--preset", "andrea-tiny", "--device", "cpu", "--steps", "1",
                              "--warmup", "1", "--rounds", "1", "--no-memory-pass", "--variants", "lightning,bare",
                              "--json", str(tiny)], tiny, _as_dry_run(read_throughput)),
        "throughput_compiled": ([py, str(THROUGHPUT), "--help"], None, read_dry_run),
    }
    return [Part(p.name, p.what, argv, 120, needs=p.needs if p.name == "fit_cuda_vs_torch" else (),
                 result_json=result, read=read, brief=p.brief if result == tiny else None)
            for p in gpu_parts for argv, result, read in [stand_ins[p.name]]]


def plan(work: Path, dry_run: bool, py: str = sys.executable) -> list[Part]:
    """Every part, in the order they run (the most telling first: a short budget cuts the end)."""
    common = {"ANDREA_LAB_CACHE": str(work / "cache"), "PYTHONUNBUFFERED": "1"}  # kernels built once, reused
    env_part = Part("environment", "driver, nvcc, torch, device; builds the kernels for this GPU",
                    [py, str(WORKLOADS), "environment", "--json", str(work / "environment.json"),
                     *(["--dry-run"] if dry_run else [])], 90, needs=("torch",),
                    result_json=work / "environment.json", brief=brief_environment)
    gpu = _gpu_parts(work, py)
    parts = [env_part, *(_dry_parts(gpu, work, py) if dry_run else gpu)]
    for part in parts:
        part.env = {**common, **part.env}
    return parts


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
    return {"schema": 1, "mode": "dry_run" if dry_run else "gpu",
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "wall_s": round(wall_s, 1),
            "budget_s": budget_s, "ok": all(s.status in GOOD for s in sections),
            "statuses": {s.name: s.status for s in sections}, "parts": {s.name: asdict(s) for s in sections}}


def summary_markdown(report: dict) -> str:
    """The readable summary: one row per part, then each part's reason when it did not pass."""
    env = report["parts"].get("environment", {})
    lines = [f"# GPU check ({report['mode']}), {report['started']}, {report['wall_s']:.0f} s of a "
             f"{report['budget_s']:.0f} s budget: {'all parts passed' if report['ok'] else 'NOT all parts passed'}",
             "", f"Environment: {env.get('headline', 'not recorded')}", "",
             "| part | status | seconds (cap) | outcome |", "| --- | --- | --- | --- |"]
    for name, s in report["parts"].items():
        outcome = (s["headline"] or s["reason"]).replace("|", "/").replace("\n", " ")
        lines.append(f"| {name} | {s['status']} | {s['wall_s']:.0f} ({s['cap_s']:.0f}) | {outcome} |")
    failed = [(name, s) for name, s in report["parts"].items() if s["status"] not in GOOD]
    for name, s in failed:
        lines += ["", f"## {name}: {s['status']}", "", s["reason"] or "(no reason given)", "", "```",
                  s["log_tail"][-1500:].rstrip(), "```"]
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="docs/kernels.md: the GPU machine's command and what the JSON means")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: $OUT when set, else ./gpu-check)")
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch directory for the parts (default: a new temporary one; kept)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help=f"seconds for the whole run (default {DEFAULT_BUDGET_S:.0f}); parts after it are not run")
    parser.add_argument("--parts", default="", help="comma-separated subset of the parts, in the usual order")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: CPU stand-ins of every GPU part")
    return parser.parse_args(argv)


def select(parts: list[Part], wanted: str) -> list[Part]:
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = sorted(set(names) - {p.name for p in parts})
    if unknown:
        print(f"benchmarks/gpu_check.py: unknown parts {', '.join(unknown)}; valid: "
              f"{', '.join(p.name for p in parts)}", file=sys.stderr)
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
