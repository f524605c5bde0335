"""What a run ran on, recorded beside its numbers: the precision, the device and, on the CPU, the model and
its bf16 units. Speeds differ by machine and losses by precision, so a comparison between runs that differ
in either compares the machines too (``andrea compare`` refuses such a claim unless the claim declares it,
andrea_lab.experiments.compare.claims). Detected, never assumed: the bf16 units are read from /proc/cpuinfo."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any, Optional

#: The CPU flags that say whether bf16 matmuls have hardware (AMX tiles, AVX-512 BF16).
BF16_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f")


def precision_name(precision: str) -> str:
    """A recorded precision as reports say it: ``bf16-mixed`` (``bf16``, ``bf16-true`` too) or ``fp32``."""
    return "bf16-mixed" if str(precision).startswith("bf16") else "fp32"


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The CPU model and which of :data:`BF16_FLAGS` it lists (``unknown`` and none where it cannot be read)."""
    model, flags = "unknown", set()
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        model = platform.processor() or "unknown"
    return {"cpu": model, "bf16_flags": [flag for flag in BF16_FLAGS if flag in flags]}


def has_bf16_units(flags: list[str]) -> bool:
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cpu_kind(cpu: Optional[dict[str, Any]] = None) -> str:
    """This CPU's ``kind`` as a run records it: its model, with ``+bf16`` where it has bf16 units."""
    cpu = cpu if cpu is not None else cpu_description()
    return cpu["cpu"] + (" +bf16" if has_bf16_units(cpu["bf16_flags"]) else "")


def machine_record(precision: Any, device_type: str, device_name: Optional[str] = None) -> dict[str, Any]:
    """summary.json's ``machine``: ``precision`` (Lightning's setting, e.g. ``32-true``, ``bf16-mixed``),
    ``device`` (``cpu``, ``cuda``...), ``kind`` (what a comparison must keep equal: the GPU's name, or the
    CPU model with ``+bf16`` where it has bf16 units), the CPU's model and bf16 flags, and ``threads``
    (torch's intra-op threads): the same config and seed are bit-identical on one machine at one thread
    count, whichever launcher forked the fit, but not across thread counts (a sweep at ``-j 2`` gives each
    fit half the cores), because the matmuls split their sums differently (docs/experiments.md, "Noise")."""
    import torch  # here, not at the top: runs/ is read by compare and the sweep, which need not load torch

    cpu = cpu_description()
    if device_type == "cpu":
        kind = cpu_kind(cpu)
    else:
        kind = device_name or device_type
    return {"precision": str(precision), "device": device_type, "kind": kind, **cpu, "threads": torch.get_num_threads()}
