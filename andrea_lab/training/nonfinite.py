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

:class:`NonFiniteGuard` is the one owner of all this for a LightningModule: the policy (``stop`` or
``skip``), the device-side tally, the count of skipped steps and the step's gradient norm. A module
publishes it as its ``nonfinite`` attribute, and callbacks (the stability monitor) read it through
:func:`guard_of`, never by probing the module for attributes.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Optional

import torch

from andrea_lab.errors import DivergenceError

#: The attribute a LightningModule publishes its :class:`NonFiniteGuard` as (AndreaLM does).
GUARD_ATTRIBUTE = "nonfinite"


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


class NonFiniteGuard:
    """A module's non-finite policy and tally: what to do with a step whose loss or gradient norm is
    NaN/inf (``stop``: raise :class:`DivergenceError`; ``skip``: drop its update, at most
    ``max_skipped_steps`` times in one run), and what happened so far.

    Read by callbacks: :attr:`last_grad_norm` (this optimizer step's global gradient norm before
    clipping, a device tensor, None on a micro-batch that does not step), :attr:`skips` and
    :attr:`skipped_steps`."""

    def __init__(self, policy: Literal["stop", "skip"], max_skipped_steps: int) -> None:
        self.policy = policy
        self.max_skipped_steps = max_skipped_steps
        self.skipped_steps = 0
        self.last_grad_norm: Optional[torch.Tensor] = None
        self._tally = NonFiniteTally()

    @property
    def skips(self) -> bool:
        """Whether a non-finite step is dropped and the run goes on (not a divergence until it gives up)."""
        return self.policy == "skip"

    def observe(self, optimizer: torch.optim.Optimizer, step: int, loss: torch.Tensor, norm: torch.Tensor) -> bool:
        """Record this step without a host sync where the optimizer can skip itself on the device
        (``found_inf``); returns True when the host must :meth:`settle` now (any other optimizer, and
        this step is non-finite), while its update can still be dropped."""
        bad = ~(torch.isfinite(norm) & torch.isfinite(loss))
        self._tally.record(bad, step, loss, norm)
        if takes_found_inf(optimizer):
            optimizer.found_inf = bad.float()
            return False
        return bool(bad)

    def settle(self, last_checkpoint: str) -> int:
        """Read the tally (one host sync) and apply the policy: the number of steps skipped now (0 if
        none were non-finite), or :class:`DivergenceError` naming the first bad step and ``last_checkpoint``."""
        found = self._tally.collect()
        if found is None:
            return 0
        where = (f"step {found.first_step}" if found.count == 1
                 else f"{found.count} steps from step {found.first_step}")
        first = f"loss {found.loss}, gradient norm {found.grad_norm}"
        if self.skips and self.skipped_steps + found.count <= self.max_skipped_steps:
            self.skipped_steps += found.count
            warnings.warn(f"non-finite loss or gradient norm at {where} (first: {first}); update skipped "
                          f"({self.skipped_steps} of at most {self.max_skipped_steps})", RuntimeWarning)
            return found.count
        reason = (f"more than max_skipped_steps={self.max_skipped_steps} non-finite steps" if self.skips
                  else "on_nonfinite=stop")
        raise DivergenceError(f"training diverged at step {found.first_step}: {first} ({reason}). Non-finite "
                              f"updates are never applied; the last good checkpoint is kept: {last_checkpoint}. "
                              f"Try a lower model.lr, more model.warmup_steps, or trainer.gradient_clip_val.")


def guard_of(module: Any) -> Optional[NonFiniteGuard]:
    """The :class:`NonFiniteGuard` a LightningModule publishes (:data:`GUARD_ATTRIBUTE`), or None: a
    module without one measures nothing the callbacks could reuse."""
    guard = getattr(module, GUARD_ATTRIBUTE, None)
    return guard if isinstance(guard, NonFiniteGuard) else None
