"""The plan of benchmarks/gpu_check.py: each part's command, time cap, needs and readers, in the order they run,
and the CPU stand-in of each for ``--dry-run`` (a module of its own so that the runner stays short)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Callable

from benchmarks.gpu_check_parts import (
    SANITIZER_ERROR_EXIT,
    Part,
    brief_environment,
    brief_fit,
    brief_kernels,
    brief_sanitizer,
    brief_tests,
    brief_throughput,
    read_dry_run,
    read_fit,
    read_junit,
    read_kernels,
    read_sanitizer,
    read_throughput,
)

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "benchmarks" / "gpu_check_workloads.py"
KERNELS = ROOT / "benchmarks" / "kernel_bandwidth.py"
THROUGHPUT = ROOT / "benchmarks" / "throughput.py"


# -- the parts -----------------------------------------------------------------------------------------
def _sanitizer() -> str:
    """compute-sanitizer on PATH, else beside nvcc, else the toolkit's default place (may not exist)."""
    found = shutil.which("compute-sanitizer")
    nvcc = shutil.which("nvcc")
    beside = Path(nvcc).resolve().parent / "compute-sanitizer" if nvcc else None
    if found:
        return found
    return str(beside) if beside and beside.exists() else "/usr/local/cuda/bin/compute-sanitizer"


def _gpu_tests(work: Path, py: str) -> Part:
    return Part(
        "gpu_tests",
        "pytest -m gpu, ANDREA_REQUIRE_GPU=1 (a skip fails)",
        [
            py,
            *"-m pytest -m gpu -q -p no:randomly -p no:cacheprovider --continue-on-collection-errors".split(),
            f"--junitxml={work / 'gpu_tests.xml'}",
        ],
        90,
        needs=("pytest", "andrea_lab_cuda"),
        env={"ANDREA_REQUIRE_GPU": "1"},
        result_json=work / "gpu_tests.xml",
        read=read_junit,
        brief=brief_tests,
    )


def _sanitizer_part(tool: str, py: str) -> Part:
    return Part(
        f"sanitizer_{tool}",
        f"compute-sanitizer --tool {tool}: LayerNorm, RMSNorm rows >> grid, SwiGLU, GELU",
        [
            _sanitizer(),
            "--tool",
            tool,
            "--error-exitcode",
            str(SANITIZER_ERROR_EXIT),
            *"--print-limit 50".split(),
            py,
            str(WORKLOADS),
            "sanitize",
        ],
        45,
        needs=("andrea_lab_cuda",),
        tool=_sanitizer(),
        read=read_sanitizer,
        brief=brief_sanitizer,
    )


def _kernels_part(short: str, dtype: str, work: Path, py: str) -> Part:
    return Part(
        f"kernels_{short}",
        f"benchmarks/kernel_bandwidth.py {dtype}: bandwidth as a fraction of a measured copy",
        [
            py,
            str(KERNELS),
            "--dtype",
            dtype,
            *"--min-log2 20 --max-log2 26 --step-log2 2 --warmup 2 --reps 10 --no-compile".split(),
            "--json",
            str(work / f"kernels_{short}.json"),
        ],
        25,
        needs=("andrea_lab_cuda",),
        result_json=work / f"kernels_{short}.json",
        read=read_kernels,
        brief=brief_kernels,
    )


def _fit_part(work: Path, py: str) -> Part:
    return Part(
        "fit_cuda_vs_torch",
        "200 steps of ANDREA-120M, bf16, cuda vs torch backend: loss curves",
        [
            py,
            str(WORKLOADS),
            "fit-compare",
            "--work",
            str(work / "fit"),
            "--json",
            str(work / "fit.json"),
            *"--steps 200".split(),
        ],
        160,
        needs=("jsonargparse", "tensorboard", "andrea_lab_cuda"),
        result_json=work / "fit.json",
        read=read_fit,
        brief=brief_fit,
    )


def _throughput_part(mode: str, extra: list[str], cap: float, work: Path, py: str) -> Part:
    return Part(
        f"throughput_{mode}",
        f"benchmarks/throughput.py andrea-120m bf16 {mode}: (a) (b) (c), MFU",
        [
            py,
            str(THROUGHPUT),
            *(
                "--preset andrea-120m --device cuda --precision bf16-mixed --batch-size 16 "
                "--warmup 5 --steps 10 --rounds 1 --no-memory-pass"
            ).split(),
            "--json",
            str(work / f"throughput_{mode}.json"),
            *extra,
        ],
        cap,
        needs=("transformers",),
        result_json=work / f"throughput_{mode}.json",
        read=read_throughput,
        brief=brief_throughput,
    )


def _gpu_parts(work: Path, py: str) -> list[Part]:
    return [
        _gpu_tests(work, py),
        *(_sanitizer_part(tool, py) for tool in ("memcheck", "racecheck")),
        *(_kernels_part(short, dtype, work, py) for short, dtype in (("bf16", "bfloat16"), ("fp32", "float32"))),
        _fit_part(work, py),
        *(
            _throughput_part(mode, extra, cap, work, py)
            for mode, extra, cap in (("eager", [], 60), ("compiled", ["--compile"], 150))
        ),
    ]


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
        "gpu_tests": (
            [py, *"-m pytest -m gpu --collect-only -q -p no:randomly -p no:cacheprovider".split()],
            None,
            read_dry_run,
        ),
        "sanitizer_memcheck": ([py, str(WORKLOADS), "sanitize", "--dry-run"], None, read_dry_run),
        "sanitizer_racecheck": ([py, str(WORKLOADS), "sanitize", "--dry-run"], None, read_dry_run),
        "kernels_bf16": ([py, str(KERNELS), "--help"], None, read_dry_run),
        "kernels_fp32": ([py, str(KERNELS), "--help"], None, read_dry_run),
        "fit_cuda_vs_torch": (
            [
                py,
                str(WORKLOADS),
                "fit-compare",
                "--work",
                str(work / "fit"),
                "--json",
                str(work / "fit.json"),
                *"--steps 3 --dry-run".split(),
            ],
            work / "fit.json",
            read_dry_run,
        ),
        "throughput_eager": (
            [
                py,
                str(THROUGHPUT),
                *(
                    "--preset andrea-tiny --device cpu --steps 1 --warmup 1 --rounds 1 "
                    "--no-memory-pass --variants lightning,bare --json"
                ).split(),
                str(tiny),
            ],
            tiny,
            _as_dry_run(read_throughput),
        ),
        "throughput_compiled": ([py, str(THROUGHPUT), "--help"], None, read_dry_run),
    }
    return [
        Part(
            p.name,
            p.what,
            argv,
            120,
            needs=p.needs if p.name == "fit_cuda_vs_torch" else (),
            result_json=result,
            read=read,
            brief=p.brief if result == tiny else None,
        )
        for p in gpu_parts
        for argv, result, read in [stand_ins[p.name]]
    ]


def plan(work: Path, dry_run: bool, py: str = sys.executable) -> list[Part]:
    """Every part, in the order they run (the most telling first: a short budget cuts the end)."""
    common = {"ANDREA_LAB_CACHE": str(work / "cache"), "PYTHONUNBUFFERED": "1"}  # kernels built once, reused
    env_part = Part(
        "environment",
        "driver, nvcc, torch, device; builds the kernels for this GPU",
        [
            py,
            str(WORKLOADS),
            "environment",
            "--json",
            str(work / "environment.json"),
            *(["--dry-run"] if dry_run else []),
        ],
        90,
        needs=("torch",),
        result_json=work / "environment.json",
        brief=brief_environment,
    )
    gpu = _gpu_parts(work, py)
    parts = [env_part, *(_dry_parts(gpu, work, py) if dry_run else gpu)]
    for part in parts:
        part.env = {**common, **part.env}
    return parts
