"""Preemption: on SIGTERM or SIGUSR1 a fit writes a checkpoint of its last completed optimizer step and stops.

Lightning already has most of this, and it is used: its signal connector turns SIGTERM into
``trainer.received_sigterm``, the training loop raises ``SIGTERMException`` at the end of the current
batch, and the callbacks' ``on_exception`` runs on the way out, where this one saves the checkpoint as
:class:`~lightning.pytorch.callbacks.OnExceptionCheckpoint` does. It is not an ``OnExceptionCheckpoint``
itself: with one of those among the callbacks, Lightning turns every ``fit`` without ``ckpt_path`` into
``ckpt_path="last"``, so a new fit would silently continue from an old checkpoint. What Lightning lacks
for an *exact* resume, and what this callback adds:

* **gradient accumulation**: a signal that arrives between the micro-batches of one optimizer step is
  held back until that step is taken, and only then handed to Lightning's own handler. A checkpoint
  between micro-batches would drop the accumulated gradients and put the loop off the accumulation
  boundary; this one resumes bit-identically (the data position is ``global_step x accumulate``);
* **SIGUSR1** (what SLURM sends ahead of the time limit with ``#SBATCH --signal=USR1@90``) stops the
  fit the same way. Under SLURM with Lightning's auto-requeue, Lightning's own SIGUSR1 handler runs
  first (it writes ``hpc_ckpt_N.ckpt`` and requeues the job), at the same step boundary;
* the checkpoint is written only when a signal stopped the fit (a crash in the middle of a step
  leaves no half-consistent state behind), through the trainer's checkpoint IO (atomic, with a manifest),
  and is kept after the fit ends.

``andrea fit`` then exits with status 4 (:class:`andrea_lab.errors.PreemptedError`) and prints the
command that resumes: the same arguments plus ``--ckpt_path <run>/checkpoints/preempted.ckpt``.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, Optional

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from andrea_lab.errors import UsageError
from andrea_lab.runs.directory import PREEMPTED_CHECKPOINT

#: The checkpoint's file name (without ``.ckpt``) in the run's checkpoint directory.
PREEMPTED_NAME = Path(PREEMPTED_CHECKPOINT).stem
STOP_SIGNALS = ("SIGTERM", "SIGUSR1")


class PreemptionCheckpoint(L.Callback):
    """Stop on ``signals`` at the next optimizer-step boundary and write ``<checkpoints>/<filename>.ckpt``."""

    def __init__(self, filename: str = PREEMPTED_NAME, signals: tuple[str, ...] = STOP_SIGNALS) -> None:
        if not filename:
            raise ValueError("preemption.filename cannot be empty")
        self.filename = filename
        self.dirpath: Optional[str] = None  # the run's checkpoint directory, known at setup
        for name in signals:
            if not name.startswith("SIG") or not hasattr(signal, name):
                raise UsageError(f"preemption.signals: {name!r} is not a signal here; e.g. {', '.join(STOP_SIGNALS)}")
        self.signals = tuple(signals)
        self.received: Optional[int] = None  # the signal number once one arrived
        self.forwarded = False
        self.saved: Optional[Path] = None
        self.step: Optional[int] = None
        self._trainer: Optional[L.Trainer] = None
        self._previous: dict[int, Any] = {}
        self._aligned = False  # the logging step checked on this fit's first batch (on_train_batch_start)

    # ------------------------------------------------------------------ where the checkpoint goes

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer
        callback = trainer.checkpoint_callback
        if callback is not None and getattr(callback, "dirpath", None):
            self.dirpath = callback.dirpath
        else:
            self.dirpath = str(Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints")

    # ------------------------------------------------------------------ signals

    def _install(self) -> None:
        """Put our handler in front of whatever is there (Lightning's, registered when the fit started)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for name in self.signals:
            signum = getattr(signal, name)
            current = signal.getsignal(signum)
            if current != self._on_signal:
                self._previous[signum] = current
                signal.signal(signum, self._on_signal)

    def _uninstall(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._install()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._install()
        self._aligned = False

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        """On a resumed fit's first batch: the step the logger writes is the optimizer step.

        Lightning keeps the logging step (``_batches_that_stepped``) apart from ``global_step`` and, when it
        restores a checkpoint, adds one to it, assuming the checkpoint was written before the step's
        increment (as ModelCheckpoint's are). The preemption checkpoint is written after it (the SIGTERM is
        raised at the end of the step, validation included), so a resumed curve was logged one step late
        with exact weights. With one optimizer and automatic optimization the two counts are the same
        number at every batch start, so the first batch sets it so."""
        if self._aligned:
            return
        self._aligned = True
        loop = trainer.fit_loop.epoch_loop
        if pl_module.automatic_optimization and len(trainer.optimizers) == 1:
            loop._batches_that_stepped = trainer.global_step

    def _mid_accumulation(self) -> bool:
        """True while gradients of an optimizer step not yet taken are accumulated (or being computed)."""
        trainer = self._trainer
        if trainer is None or trainer.state.fn != TrainerFn.FITTING:
            return False
        loop = trainer.fit_loop.epoch_loop
        return loop.batch_progress.current.ready > 0 and loop._should_accumulate()

    def _on_signal(self, signum: int, frame: Any) -> None:
        first = self.received is None
        self.received = signum
        if first:
            rank_zero_info(
                f"\n{signal.Signals(signum).name} received: stopping after the current optimizer step "
                "and writing a checkpoint"
            )
        if not self.forwarded and not self._mid_accumulation():
            self._forward(frame)

    def _forward(self, frame: Any = None) -> None:
        """Hand the signal to Lightning: its SLURM SIGUSR1 handler (if any), then its SIGTERM handler, which
        sets ``trainer.received_sigterm`` (and stops DDP's other processes) so the loop ends the fit."""
        self.forwarded = True
        assert self.received is not None
        order = [self.received] if self.received == signal.SIGTERM else [self.received, signal.SIGTERM]
        for signum in order:
            handler = self._previous.get(signum)
            if callable(handler):
                handler(signal.SIGTERM if signum == signal.SIGTERM else signum, frame)
        if self._trainer is not None and not self._trainer.received_sigterm:
            self._trainer._signal_connector.received_sigterm = True  # Lightning's handler was not installed

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self.received is not None and not self.forwarded and not trainer.fit_loop.epoch_loop._should_accumulate():
            self._forward()  # the step the signal waited for was just taken

    # ------------------------------------------------------------------ the checkpoint

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._uninstall()
        if (
            not isinstance(exception, SIGTERMException)
            or trainer.state.fn != TrainerFn.FITTING
            or self._mid_accumulation()
        ):
            return  # a crash, a stopped validate/test, or a step half done: nothing worth resuming from
        self.step = trainer.global_step
        # weights_only=False said, not defaulted: Lightning's weights_only here means "no optimizer or loop state",
        # which a resume needs, and left unset it logs "`weights_only` was not set, defaulting to `False`" at every
        # SIGTERM, which reads like torch.load's security warning and asks nothing of the user (checkpoints are
        # read weights-only by torch.load in runs.checkpoint_io whatever this says).
        trainer.save_checkpoint(self.ckpt_path, weights_only=False)
        self.saved = Path(self.ckpt_path)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._uninstall()  # and keep the checkpoint (OnExceptionCheckpoint would delete it here)

    @property
    def ckpt_path(self) -> str:
        return str(Path(self.dirpath) / f"{self.filename}.ckpt")

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else "SIGTERM"
