"""How many windows an evaluation scores per forward pass: from the model's shape and a memory bound.

An evaluation is forward only (no activations kept for a backward), so its batch is bounded by what one forward
holds at once, not by the training batch. Per window of T tokens, :func:`window_bytes` counts the largest
transients: the logits in the compute dtype, their float32 copy and the cross-entropy's float32 log-softmax
(3 x T x V), one block's activations (the residual stream, q/k/v, the attention output and the MLP's hidden layer
before and after its activation: (6 + 2 x mlp_ratio) x T x d), and one block's attention scores (heads x T x T,
which the explicit attention path materialises; SDPA's fused kernels need less). The batch is the bound divided by
that, at least 1.

The bound is the memory that keeps the forward fast, which differs by device:

* **CUDA**: a quarter of the device memory free when the evaluation starts (the model and optimizer are already
  there; the rest is headroom for the allocator and for other processes on the card).
* **CPU**: half the last-level cache. Larger batches are *slower* on the CPU: their activations leave the cache.
  ``python benchmarks/heldout_batch.py --batches 8,16,32,64,128,512 --windows 512 --rounds 4 --no-setup``, 2026-12-05
  on the 2-core AMD EPYC (32 MiB L3), 1 thread, load average 5.6-6.8, this process's CPU seconds (the best of 4
  interleaved passes; wall time ranked the sizes alike):

  | model | batch 8 | 16 | 32 | 64 | 128 | 512 |
  |---|---|---|---|---|---|---|
  | d64 fp32 | 0.57 | 0.53 | 0.53 | 0.54 | 0.57 | 0.71 |
  | d256 bf16 autocast | 2.86 | 2.67 | 2.71 | 2.64 | 2.62 | 3.30 |

  Half of 32 MiB gives 34 windows at d64 fp32 and 24 at d256 in bf16 (:func:`window_bytes`): inside the flat
  optimum at both widths (16-128 within 4 %), where 8 windows cost 6-8 % more and 512 windows 25-34 % more.

``heldout.batch_size`` sets the batch outright; ``heldout.memory_mib`` sets the bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

#: The share of the free CUDA memory, and of the CPU's last-level cache, an evaluation batch may take (1/4, 1/2:
#: see the module docstring).
CUDA_SHARE = 4
CACHE_SHARE = 2
#: The last-level cache assumed where sysfs cannot say (the 32 MiB of the machine the rule was measured on).
FALLBACK_CACHE_BYTES = 32 << 20
#: The MLP width ratio counted where the config leaves it to the activation (4 for GELU and ReLU; SwiGLU's 8/3
#: with its two input projections holds about as much).
DEFAULT_MLP_RATIO = 4.0


def window_bytes(config: Any, compute_bytes: int) -> int:
    """The bytes one window of ``config.block_size`` tokens holds at once in a forward pass plus its loss, with
    activations of ``compute_bytes`` each (2 under bf16 autocast, 4 in float32)."""
    tokens, vocab, width = int(config.block_size), int(config.vocab_size), int(config.d_model)
    ratio = float(getattr(config, "mlp_ratio", None) or DEFAULT_MLP_RATIO)
    logits = tokens * vocab * (compute_bytes + 4 + 4)  # the logits, their float copy, the log-softmax
    block = tokens * width * (6 + 2 * ratio) * compute_bytes
    scores = int(config.n_head) * tokens * tokens * compute_bytes
    return int(logits + block + scores)


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> Optional[int]:
    """The size of the CPU's highest cache level as sysfs reports it (``index*/level``, ``size`` like ``32768K``);
    None where it cannot be read."""
    best: Optional[tuple[int, int]] = None
    try:
        for index in root.glob("index*"):
            level = int((index / "level").read_text().strip())
            size = _size_bytes((index / "size").read_text().strip())
            if size is not None and (best is None or level > best[0]):
                best = (level, size)
    except (OSError, ValueError):
        return None
    return None if best is None else best[1]


def _size_bytes(text: str) -> Optional[int]:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text) if text.isdigit() else None


def memory_bound(device: torch.device) -> int:
    """The bytes an evaluation batch may take on ``device``: a quarter of the free device memory on CUDA, half
    the last-level cache on the CPU (why: the module docstring)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free) // CUDA_SHARE
    return (last_level_cache_bytes() or FALLBACK_CACHE_BYTES) // CACHE_SHARE


def eval_batch_size(config: Any, compute_bytes: int, bound_bytes: int) -> int:
    """Windows per forward pass: as many as fit ``bound_bytes`` (:func:`window_bytes`), at least 1."""
    return max(1, int(bound_bytes) // window_bytes(config, compute_bytes))


def scoring_precision(device: torch.device, parameters_dtype: torch.dtype) -> tuple[torch.dtype, str]:
    """The dtype a forward computes in right now and its name for the record (``bfloat16 autocast``,
    ``float32``): autocast's where it is on for ``device``, else the parameters'. Called inside the precision
    plugin's forward context, it says which precision scored."""
    if torch.is_autocast_enabled(device.type):
        dtype = torch.get_autocast_dtype(device.type)
        return dtype, f"{_name(dtype)} autocast"
    return parameters_dtype, _name(parameters_dtype)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
