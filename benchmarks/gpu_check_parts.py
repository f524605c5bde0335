"""The parts of benchmarks/gpu_check.py: what a part is (a command, a time cap) and how the output of
each kind of part is read back into its section and summarised in one line. Kept apart from the runner
(gpu_check.py) so that each file has one job: this one knows the parts' output formats (pytest's JUnit
XML, compute-sanitizer's summary line, the benchmarks' JSON), the runner knows processes and budgets."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


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
            message = next(child for child in case if child.tag == kind).text or ""
        counts[key] += 1
        if kind:
            counts["not_passed"].append(f"{case.get('classname')}::{case.get('name')}: {key}: {message[:300]}")
    return counts


#: compute-sanitizer's words when it cannot work on this device or under this runtime.
SANITIZER_REFUSALS = (
    "Device not supported",
    "not supported on this",
    "Unable to find injection library",
    "Error: Target application terminated before first instrumented API call",
    "error 999",
    "Failed to initialize",
)


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
    return "ok", {
        "device": data.get("device"),
        "copy_peak_gbps": data["copy_peak_gbps"],
        "fraction_of_copy_at_largest": fractions,
        "targets": data.get("targets", []),
    }


def read_throughput(part: Part, code: int, log: str) -> tuple[str, dict]:
    """tokens/s, ms/step and MFU of each variant, the measured matmul peak, the (a)/(b) and (b)/(c) ratios."""
    data = _json_result(part)
    if code != 0 or "variants" not in data:
        return "failed", {}
    variants = {
        name: {key: v.get(key) for key in ("tokens_per_s", "ms_per_step", "mfu", "peak_memory_bytes")}
        for name, v in data["variants"].items()
        if isinstance(v, dict)
    }
    ratios = {name: (r or {}).get("pooled_median") for name, r in data.get("ratios", {}).items() if name != "ablations"}
    return "ok", {
        "variants": variants,
        "matmul_peak_flops_per_s": data["matmul_peak"]["flops_per_s"],
        "ratios": ratios,
        "targets": data.get("targets", []),
    }


def read_fit(part: Part, code: int, log: str) -> tuple[str, dict]:
    data = _json_result(part)
    comparison = data.get("comparison")
    if comparison is None:
        return "failed", data
    status = "ok" if code == 0 else "failed"
    reason = (
        ""
        if status == "ok"
        else (
            f"loss curves {'agree' if comparison['agree'] else 'differ'}, "
            f"{'both learned' if comparison['learned'] else 'a run did not learn'}"
        )
    )
    return status, {**data, **({"reason": reason} if reason else {})}


# -- one line per part for the summary ---------------------------------------------------------------
def brief_environment(r: dict) -> str:
    device = r.get("torch", {}).get("device", {})
    backend = r.get("cuda_backend", {})
    driver = r["driver"].get("driver_version") or r["driver"].get("error")
    return (
        f"{device.get('name', 'no CUDA device')}, driver {driver}, "
        f"{(r.get('toolchain') or {}).get('nvcc_version') or 'no nvcc'}, torch {r['torch']['version']} "
        f"(CUDA {r['torch']['cuda']}); cuda backend: "
        f"{'available' if backend.get('available') else 'NOT available: ' + backend.get('reason', '?')}"
    )


def brief_tests(r: dict) -> str:
    return f"{r['passed']} passed, {r['failed']} failed, {r['errors']} errors, {r['skipped']} skipped" + (
        f" ({r['skipped_at_collection']} modules skipped while collecting: see not_passed)"
        if r.get("skipped_at_collection")
        else ""
    )


def brief_sanitizer(r: dict) -> str:
    return r.get("summary") or "no ERROR SUMMARY line"


def brief_kernels(r: dict) -> str:
    ops = ", ".join(
        f"{op} {d['cuda']:.0%}" + (f" (eager {d['eager']:.0%})" if "eager" in d else "")
        for op, d in r["fraction_of_copy_at_largest"].items()
        if "cuda" in d
    )
    return f"copy {r['copy_peak_gbps']:,.0f} GB/s; at the largest size, of copy: {ops}"


def brief_fit(r: dict) -> str:
    c = r["comparison"]
    return (
        f"{c['steps']} steps; loss {c['first']['cuda']:.3f} -> cuda {c['final']['cuda']:.3f} / torch "
        f"{c['final']['torch']:.3f}; mean |diff| last 20 steps {c['mean_abs_diff_last_20']:.4f} "
        f"(allowed {c['tolerance_last_20']}), max {c['max_abs_diff']:.4f}"
    )


def brief_throughput(r: dict) -> str:
    rows = "; ".join(
        f"{name} {v['tokens_per_s']:,.0f} tok/s, MFU {v['mfu']:.1%}"
        for name, v in r["variants"].items()
        if v.get("tokens_per_s")
    )
    return f"{rows} (bf16 matmul peak {r['matmul_peak_flops_per_s'] / 1e12:.0f} TFLOP/s)"
