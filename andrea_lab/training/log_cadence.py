"""Whether the logger keeps the values of the optimizer step being taken.

Each ``self.log`` costs host time (~0.9 ms on 2 CPU cores, docs/performance.md), so the per-step scalars
other than the loss (AndreaLM's learning rate and tokens, the non-finite guard's gradient norm) are logged
only on the steps Lightning's logger writes. One function, so that they all agree on which steps those are.
"""

from __future__ import annotations

import lightning as L


def logger_writes_now(trainer: L.Trainer) -> bool:
    """Whether the logger keeps this step's values: Lightning writes every ``log_every_n_steps``-th step,
    counted from 1 (called before the step is taken, so one more than ``trainer.global_step``)."""
    return (trainer.global_step + 1) % max(1, trainer.log_every_n_steps) == 0
