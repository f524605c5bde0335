"""The machine a run measures: what it is (``machine_info``), its peak memory per variant and its matmul
peak (the denominator of MFU), measured in the same run."""

from __future__ import annotations

import datetime as _dt
import gc
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch


def machine_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "thread_env": {
            k: os.environ[k]
            for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
            if k in os.environ
        },
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": _version("lightning"),
        "transformers": _version("transformers"),
        "device": str(device),
        "device_name": _cpu_model(),
        "load_average_start": list(os.getloadavg()),
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
        info["gpu_count"] = torch.cuda.device_count()
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


class PeakMemory:
    """Peak memory of one variant: CUDA ``max_memory_allocated``; on the CPU, the peak RSS over the
    RSS at the start (Linux: the high-water mark VmHWM, reset through /proc/self/clear_refs; else
    ``ru_maxrss``, which can only grow and so reads 0 when an earlier variant peaked higher)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.kind = ""
        self.start_bytes = 0

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        _malloc_trim()  # hand freed heap pages back, so the next variant's pages count again
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.kind = "cuda max_memory_allocated"
            return self
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self.start_bytes = _proc_status_kb("VmRSS") * 1024
            self.kind = "cpu peak RSS - RSS at start (VmHWM)"
        except OSError:
            self.start_bytes = _ru_maxrss_bytes()
            self.kind = "cpu ru_maxrss growth"
        return self

    def __exit__(self, *exc) -> None:
        return None

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        if "VmHWM" in self.kind:
            return max(0, _proc_status_kb("VmHWM") * 1024 - self.start_bytes)
        return max(0, _ru_maxrss_bytes() - self.start_bytes)


def _malloc_trim() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _proc_status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise OSError(f"{key} not in /proc/self/status")


def _ru_maxrss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_matmul_peak(device: torch.device, dtype: torch.dtype, budget_s: float = 2.0) -> dict[str, Any]:
    """The best median rate of square ``torch.mm`` over a few sizes (FLOP/s), on this device and dtype."""
    sizes = (4096, 8192) if device.type == "cuda" else (512, 1024, 2048)
    rates, cpu_rates = {}, {}
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)  # warm-up (and library initialisation)
        _sync(device)
        if rates and time.perf_counter() - t0 > budget_s / 4:
            break  # a slow path (e.g. bf16 on a CPU without bf16 units): the smaller sizes must do
        times: list[float] = []
        cpu_times: list[float] = []
        deadline = time.perf_counter() + budget_s / len(sizes)
        while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
            c0 = time.process_time()
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.mm(a, b, out=out)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                torch.mm(a, b, out=out)
                times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        rates[n] = 2 * n**3 / statistics.median(times)
        cpu_rates[n] = 2 * n**3 / max(statistics.median(cpu_times), 1e-9)
        del a, b, out
    best = max(rates, key=rates.get)
    return {
        "flops_per_s": rates[best],
        "size": best,
        "by_size": {str(k): v for k, v in rates.items()},
        "flops_per_cpu_s": max(cpu_rates.values()),
        "load_average": list(os.getloadavg()),
    }
