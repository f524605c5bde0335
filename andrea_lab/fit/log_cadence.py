"""Which optimizer steps Lightning's logger writes: every ``log_every_n_steps``-th, counted from 1.

Each ``self.log`` costs host time (~0.9 ms on 2 CPU cores, docs/performance.md), so the per-step scalars
other than the loss (AndreaLM's learning rate and tokens, the non-finite guard's gradient norm) are logged
only on those steps, and the guard reads its tally on them. One rule, so that they all agree on the steps.
"""

from __future__ import annotations

import lightning as L


def is_logged_step(step: int, trainer: L.Trainer) -> bool:
    """Whether the logger writes the values of optimizer step ``step`` (counted from 1: the step a hook
    after it sees as ``trainer.global_step``)."""
    return step % max(1, trainer.log_every_n_steps) == 0


def logger_writes_now(trainer: L.Trainer) -> bool:
    """:func:`is_logged_step` for the step being taken (called before it, so one more than ``trainer.global_step``)."""
    return is_logged_step(trainer.global_step + 1, trainer)
