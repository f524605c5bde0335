"""A callback for the preemption tests: the fit sends itself a signal at a chosen batch, so that the signal
lands exactly where the test wants it (between the micro-batches of one gradient accumulation)."""

from __future__ import annotations

import os
import signal

import lightning as L


class SignalAtBatch(L.Callback):
    """``os.kill(own pid, signum)`` at the end of training batch ``batch_idx`` (once)."""

    def __init__(self, batch_idx: int, signum: str = "SIGTERM") -> None:
        self.batch_idx = batch_idx
        self.signum = signum
        self.sent = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == self.batch_idx and not self.sent:
            self.sent = True
            os.kill(os.getpid(), getattr(signal, self.signum))


class SignalAfterValidation(L.Callback):
    """``os.kill(own pid, signum)`` when the validation after optimizer step ``step`` ends (once)."""

    def __init__(self, step: int, signum: str = "SIGTERM") -> None:
        self.step = step
        self.signum = signum
        self.sent = False

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.global_step == self.step and not trainer.sanity_checking and not self.sent:
            self.sent = True
            os.kill(os.getpid(), getattr(signal, self.signum))
