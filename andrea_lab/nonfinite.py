"""Non-finite optimizer steps, detected without a host-device sync every step.

Why this exists: ``bool(torch.isfinite(loss))`` makes the host wait for the GPU to finish the
backward pass. Done every step, the host cannot queue the next step's kernels while the GPU works,
and Lightning's per-step host work (hooks, logging, fetching the next batch) then idles the GPU.

Instead the flag stays on the device. A fused optimizer (``AdamW(fused=True)``, on CPU and CUDA)
takes it as ``optimizer.found_inf`` -- the attribute ``torch.amp.GradScaler`` uses for the same
purpose -- and its kernel then leaves the weights, the moments and the step count untouched, on the
device. The host reads the tally only every few steps (when the logger writes anyway) and before a
checkpoint is saved, so a checkpoint never holds a run that should already have stopped.

An optimizer that cannot take the flag gets the per-step host check instead, so that the bad update
can still be dropped before it is applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import torch


def global_grad_norm(parameters: Iterable[torch.nn.Parameter]) -> Optional[torch.Tensor]:
    """The L2 norm of all the parameters' gradients together (those that have one), on their device and
    without a host sync; None when no parameter has a gradient. The one place this norm is computed
    (AndreaLM, the stability monitor, benchmarks/throughput)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads) if grads else None


def takes_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step()`` honours ``optimizer.found_inf`` (the flag ``GradScaler`` sets).

    torch marks such optimizers (the fused Adam family) with ``_step_supports_amp_scaling``; the
    others raise if the attribute is set, so it must not be handed to them."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


@dataclass(frozen=True)
class NonFiniteSteps:
    """What the host learns when it reads the tally: how many steps were non-finite since the last
    read, and the first of them with its loss and gradient norm (for the error message)."""

    count: int
    first_step: int
    loss: float
    grad_norm: float


class NonFiniteTally:
    """Counts non-finite steps on the device; :meth:`collect` reads and resets it (one host sync)."""

    def __init__(self) -> None:
        self._count: Optional[torch.Tensor] = None
        self._first: Optional[torch.Tensor] = None  # [step, loss, grad norm] of the first bad step

    def record(self, bad: torch.Tensor, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Add this step (``bad`` is a 0-d bool tensor) without reading anything back."""
        bad = bad.reshape(())
        if self._count is None:
            self._count = torch.zeros((), dtype=torch.int64, device=bad.device)
            self._first = torch.full((3,), -1.0, dtype=torch.float64, device=bad.device)
        # torch.full is a fill kernel; torch.tensor(step, device=...) would be a synchronous copy.
        this_step = torch.stack([torch.full((), float(step), dtype=torch.float64, device=bad.device),
                                 loss.detach().reshape(()).to(torch.float64),
                                 grad_norm.detach().reshape(()).to(torch.float64)])
        is_first = bad & (self._count == 0)
        self._first = torch.where(is_first, this_step, self._first)
        self._count = self._count + bad.to(torch.int64)

    def collect(self) -> Optional[NonFiniteSteps]:
        """The non-finite steps since the last call (None if there were none), and reset."""
        if self._count is None:
            return None
        count = int(self._count)  # the host sync
        if count == 0:
            return None
        step, loss, grad_norm = self._first.tolist()
        self._count = self._first = None
        return NonFiniteSteps(count, int(step), loss, grad_norm)
