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
        "CPU-sized configs: experiments/quickstart.yaml (minutes on 2 quiet cores), experiments/cpu-base.yaml"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


#: Bytes per logit: the fp32 logits of one step, tokens x vocabulary, are held for the backward pass (their
#: softmax's gradient is another such tensor): a floor on a step's memory, whatever else it needs.
LOGIT_BYTES = 4


def machine_memory_bytes() -> Optional[int]:
    """This machine's physical memory (None where the OS does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def step_memory_refusal(tokens_per_step: int, vocab_size: int, memory: Optional[int]) -> Optional[str]:
    """Why a CPU step cannot fit in this machine's memory, by a floor (the logits alone), else None: an absurd
    ``data.batch_size`` is refused in one line before anything is allocated, not met by the OOM killer
    (which, with memory overcommitted, ends the process without a word)."""
    floor = tokens_per_step * vocab_size * LOGIT_BYTES
    if memory is None or floor <= memory:
        return None
    return (
        f"a step of {tokens_per_step:,} tokens needs at least {floor / 2**30:,.0f} GiB for its logits alone "
        f"({tokens_per_step:,} tokens x vocabulary {vocab_size:,} x {LOGIT_BYTES} bytes), more than this machine's "
        f"{memory / 2**30:,.0f} GiB; lower data.batch_size (or model.config.block_size, "
        "trainer.accumulate_grad_batches)"
    )
