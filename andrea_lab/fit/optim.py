"""AndreaLM's optimizer and learning-rate schedule, for any model: AdamW with weight decay on the
matrices only, fused where torch has the kernel, and a per-step linear warmup then cosine decay.

A module of its own so that a benchmark (benchmarks/throughput trains HF GPT-2 with it) or any other
training loop uses exactly what ``andrea fit`` uses, without importing the LightningModule.
"""

from __future__ import annotations

import math
from typing import Optional

import torch


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup from 0 to 1 over ``warmup_steps``, then cosine decay to
    ``min_lr_ratio`` at ``decay_steps``, flat afterwards. ``warmup_steps == 0`` starts at the peak."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step >= decay_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def fused_adamw(param_groups: list[dict], fused: bool = True, **hparams) -> torch.optim.AdamW:
    """AdamW with the fused kernel wherever torch has one (CUDA, CPU, ...), else (or with
    ``fused=False``) torch's default implementation.

    Fused is one kernel per step instead of several per parameter group (GPU) and no slower on the
    CPU (docs/performance.md); it also takes the device-side skip flag ``found_inf`` that keeps the
    non-finite check free of host syncs (andrea_lab/fit/nonfinite.py)."""
    if not fused:
        return torch.optim.AdamW(param_groups, **hparams)
    try:
        return torch.optim.AdamW(param_groups, fused=True, **hparams)
    except RuntimeError:  # a device or dtype without the fused kernel
        return torch.optim.AdamW(param_groups, **hparams)


def tag_weight_decay(model: torch.nn.Module) -> None:
    """Mark which parameters get weight decay (``_andrea_decay``: the matrices, ``dim >= 2``), on the
    original shapes: under FSDP the optimizer later sees flattened 1-D shards, and ``p.dim()`` would
    then turn decay off for all of them."""
    for parameter in model.parameters():
        parameter._andrea_decay = parameter.dim() >= 2


def adamw_with_schedule(
    model: torch.nn.Module,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    warmup_steps: int,
    decay_steps: int,
    min_lr_ratio: float,
    fused: bool = True,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with weight decay on the matrices only (``dim >= 2``, unless a parameter says otherwise in
    ``_andrea_decay``: :func:`tag_weight_decay`), fused where torch has the kernel, and the per-step
    warmup + cosine schedule (:func:`warmup_cosine`)."""
    decays = [(p, getattr(p, "_andrea_decay", p.dim() >= 2)) for p in model.parameters()]
    optimizer = fused_adamw(
        [
            {"params": [p for p, d in decays if d], "weight_decay": weight_decay},
            {"params": [p for p, d in decays if not d], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=betas,
        eps=eps,
        fused=fused,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, warmup_steps, decay_steps, min_lr_ratio)
    )
    return optimizer, scheduler


def clip_fused(
    optimizer: torch.optim.Optimizer, clip_val: float, algorithm: Optional[str], norm: Optional[torch.Tensor]
) -> None:
    """Clip the gradients of a fused AdamW that no ``GradScaler`` scales (they are true gradients), by
    value, or by norm with ``norm``, the global norm already measured before clipping (no second pass over
    the gradients). A non-finite norm is left to the non-finite policy, whose skip happens on the device;
    no norm (a step without gradients) clips nothing. fp16 never gets here: with a scaler that must
    unscale before the clip, AndreaLM picks the unfused AdamW and Lightning clips."""
    grads = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(grads, clip_val, foreach=True)
    elif norm is not None:
        torch.nn.utils.clip_grads_with_norm_(grads, clip_val, norm, foreach=True)
