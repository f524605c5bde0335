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
``skip``), the device-side tally, the count of skipped steps and the step's gradient norm. It is a
Lightning callback that the module brings along itself (``configure_callbacks``), so that a Trainer
built anywhere (the CLI, a test, a notebook) gets it; the module also publishes it as its ``nonfinite``
attribute, and other callbacks (the stability monitor) read it through :func:`guard_of`, never by
probing the module for attributes.

Hook order, which the stability monitor relies on: Lightning calls the callbacks' hook before the
module's own, and a module's callbacks after the trainer's (``ModelCheckpoint`` last of all). So in each
optimizer step the monitor's ``on_before_optimizer_step`` runs before this guard's (it leaves the norm to
the guard), and its ``on_train_batch_end`` reads :attr:`NonFiniteGuard.last_grad_norm` after the guard
set it and before the guard settles the tally, as when these hooks were AndreaLM's own. One thing moved:
the guard's ``on_train_batch_end`` and ``on_train_end`` now settle before ``ModelCheckpoint``'s (the
module's hooks ran after it); a checkpoint saved there settles again first, so what is raised or
counted, and which checkpoints exist, is the same.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Optional

import lightning as L
import torch

from andrea_lab.errors import DivergenceError
from andrea_lab.fit.log_cadence import is_logged_step, logger_writes_now
from andrea_lab.runs import tags

#: The attribute a LightningModule publishes its :class:`NonFiniteGuard` as (AndreaLM does); the module
#: also returns the guard from ``configure_callbacks``, which is what makes its hooks run.
GUARD_ATTRIBUTE = "nonfinite"
#: The checkpoint's top-level key for :attr:`NonFiniteGuard.skipped_steps` (the format of every andrea checkpoint).
SKIPPED_STEPS_KEY = "skipped_steps"


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


def grad_scaler(trainer: L.Trainer) -> Optional[torch.amp.GradScaler]:
    """The ``GradScaler`` of the trainer's precision (fp16 only; bf16-mixed and fp32 have none)."""
    return getattr(trainer.precision_plugin, "scaler", None)


def unscaled_grad_norm(norm: torch.Tensor, optimizer: torch.optim.Optimizer, trainer: L.Trainer) -> torch.Tensor:
    """The gradient norm without the fp16 loss scale, as it is logged and read by the stability monitor.

    Under a ``GradScaler`` Lightning unscales the gradients before ``on_before_optimizer_step``, except for an
    optimizer that unscales them in its own ``step()`` (the fused AdamW, :func:`takes_found_inf`): there the
    gradients still carry the scale (65536 at first), and so would their norm. The scale is read as the
    scaler's device tensor (``GradScaler.get_scale()`` would make the host wait for the device every step)."""
    scaler = grad_scaler(trainer)
    if scaler is None or not takes_found_inf(optimizer):
        return norm
    scale = scaler._get_scale_async()  # None until the first scaled backward: nothing to undo then
    return norm if scale is None else norm / scale.to(norm.dtype)


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
        this_step = torch.stack(
            [
                torch.full((), float(step), dtype=torch.float64, device=bad.device),
                loss.detach().reshape(()).to(torch.float64),
                grad_norm.detach().reshape(()).to(torch.float64),
            ]
        )
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


class NonFiniteGuard(L.Callback):
    """A module's non-finite policy and tally: what to do with a step whose loss or gradient norm is
    NaN/inf (``stop``: raise :class:`DivergenceError`; ``skip``: drop its update, at most
    ``max_skipped_steps`` times in one run), and what happened so far.

    As a callback of its module it measures each optimizer step's gradient norm (``train/grad_norm``),
    hands the step to the policy (:meth:`observe`) and reads the tally every ``log_every_n_steps`` steps
    and at the end of training (:meth:`settle`). The module's ``training_step`` sets :attr:`last_loss`,
    and its checkpoint hooks call :meth:`save_into` and :meth:`load_from` (not this callback's own
    checkpoint hooks: Lightning skips those for a weights-only checkpoint, and ``load_from_checkpoint``
    calls only the module's).

    Read by callbacks: :attr:`last_grad_norm` (this optimizer step's global gradient norm before
    clipping, a device tensor, None on a micro-batch that does not step), :attr:`skips` and
    :attr:`skipped_steps`."""

    def __init__(self, policy: Literal["stop", "skip"], max_skipped_steps: int) -> None:
        self.policy = policy
        self.max_skipped_steps = max_skipped_steps
        self.skipped_steps = 0
        self.last_grad_norm: Optional[torch.Tensor] = None
        #: The loss the module optimises in this step (detached), checked with the gradient norm.
        self.last_loss: Optional[torch.Tensor] = None
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
        where = f"step {found.first_step}" if found.count == 1 else f"{found.count} steps from step {found.first_step}"
        first = f"loss {found.loss}, gradient norm {found.grad_norm}"
        if self.skips and self.skipped_steps + found.count <= self.max_skipped_steps:
            self.skipped_steps += found.count
            warnings.warn(
                f"non-finite loss or gradient norm at {where} (first: {first}); update skipped "
                f"({self.skipped_steps} of at most {self.max_skipped_steps})",
                RuntimeWarning,
            )
            return found.count
        reason = (
            f"more than max_skipped_steps={self.max_skipped_steps} non-finite steps"
            if self.skips
            else "on_nonfinite=stop"
        )
        raise DivergenceError(
            f"training diverged at step {found.first_step}: {first} ({reason}). Non-finite "
            f"updates are never applied; the last good checkpoint is kept: {last_checkpoint}. "
            f"Try a lower model.lr, more model.warmup_steps, or trainer.gradient_clip_val."
        )

    # ------------------------------------------------------------ the callback's hooks

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.last_grad_norm = None  # set again only if this batch ends in an optimizer step

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        norm = global_grad_norm(pl_module.parameters())  # after backward, before clipping: the raw norm
        if norm is None:
            return
        norm = unscaled_grad_norm(norm, optimizer, trainer)
        self.last_grad_norm = norm.detach()
        if logger_writes_now(trainer):
            pl_module.log(tags.TRAIN_GRAD_NORM, norm)
        if grad_scaler(trainer) is not None:
            return  # fp16: GradScaler skips overflowing steps itself; they are routine, not divergence
        loss = self.last_loss if self.last_loss is not None else norm
        if self.observe(optimizer, trainer.global_step, loss, norm):
            self._settle(trainer, optimizer)  # an optimizer without found_inf: drop the update now

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if is_logged_step(trainer.global_step, trainer):  # the step just taken
            self._settle(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._settle(trainer)

    def _settle(self, trainer: L.Trainer, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        """:meth:`settle` naming the trainer's last checkpoint; without the fused skip, ``optimizer``'s
        pending update is dropped by clearing its gradients."""
        checkpoint = getattr(trainer.checkpoint_callback, "last_model_path", "") or "none written yet"
        if not self.settle(checkpoint):
            return
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)  # AdamW leaves parameters without a grad untouched
        if trainer.logger is not None:  # directly: Lightning refuses self.log in on_train_end and checkpoint hooks
            trainer.logger.log_metrics({tags.TRAIN_SKIPPED_STEPS: float(self.skipped_steps)}, step=trainer.global_step)

    # ------------------------------------------------------------ the checkpoint

    def save_into(self, checkpoint: dict, trainer: Optional[L.Trainer]) -> None:
        """Settle first (with a trainer): ``stop`` must raise before a checkpoint of a diverged run is
        written, and the count saved must include the steps skipped since the last read."""
        if trainer is not None:
            self._settle(trainer)
        checkpoint[SKIPPED_STEPS_KEY] = self.skipped_steps

    def load_from(self, checkpoint: dict) -> None:
        """The skipped count of a resumed run (0 from a checkpoint older than the count)."""
        self.skipped_steps = checkpoint.get(SKIPPED_STEPS_KEY, 0)


def guard_of(module: Any) -> Optional[NonFiniteGuard]:
    """The :class:`NonFiniteGuard` a LightningModule publishes (:data:`GUARD_ATTRIBUTE`), or None: a
    module without one measures nothing the callbacks could reuse."""
    guard = getattr(module, GUARD_ATTRIBUTE, None)
    return guard if isinstance(guard, NonFiniteGuard) else None
