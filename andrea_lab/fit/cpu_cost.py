"""A word before a fit that will crawl: ``andrea fit`` with the config's defaults starts the 92M-parameter
ANDREA, which a GPU trains in well under a second per step and two CPU cores in about a minute. Said once,
before the first step, with the arithmetic behind it, and the CPU-sized configs to use instead."""

from __future__ import annotations

from typing import Optional

#: Training FLOPs per parameter per token: forward (2) and backward (4), attention's own left out (a floor).
FLOPS_PER_PARAMETER_TOKEN = 6
#: What two quiet cores reach on fp32 matmuls here (150-300 GFLOP/s, README's machine facts): the middle.
CPU_FLOPS_PER_S = 200e9
#: Below this many estimated seconds per step nothing is said.
QUIET_BELOW_S = 5.0


def cpu_step_note(parameters: int, tokens_per_step: int, max_steps: Optional[int]) -> Optional[str]:
    """The note for a CPU fit whose step costs at least ``QUIET_BELOW_S`` s by the FLOP count, else None."""
    flops = FLOPS_PER_PARAMETER_TOKEN * parameters * tokens_per_step
    seconds = flops / CPU_FLOPS_PER_S
    if seconds < QUIET_BELOW_S:
        return None
    total = ""
    if max_steps and max_steps > 0:
        total = f"; {max_steps:,} steps take at least {_duration(seconds * max_steps)}"
    return (
        f"note: training {parameters / 1e6:.1f}M parameters on the CPU, {tokens_per_step:,} tokens per step: "
        f"{FLOPS_PER_PARAMETER_TOKEN} x parameters x tokens = {flops / 1e12:.1f} TFLOP per step, at least "
        f"{seconds:.0f} s per step at {CPU_FLOPS_PER_S / 1e9:.0f} GFLOP/s (what 2 cores reach){total}. "
        "CPU-sized configs: experiments/quickstart.yaml (about 5 minutes), experiments/cpu-base.yaml"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
