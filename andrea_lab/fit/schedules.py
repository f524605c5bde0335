"""The built-in learning-rate schedules (entry-point group ``andrea_lab.schedule``): multipliers of the peak LR.

Each is a pure function of the optimizer step (contract: :class:`andrea_lab.model.training_contracts.Schedule`),
with the same linear warmup, so a resumed run continues exactly and two schedules differ only after warmup.
"""

from __future__ import annotations

import math
from typing import ClassVar, Mapping

from andrea_lab.model.plugin_options import Option
from andrea_lab.model.training_contracts import Schedule


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup from 0 to 1 over ``warmup_steps``, then cosine decay to
    ``min_lr_ratio`` at ``decay_steps``, flat afterwards. ``warmup_steps == 0`` starts at the peak."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step >= decay_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosine(Schedule):
    """Linear warmup, then cosine decay to min_lr_ratio at decay_steps: the default."""

    def multiplier(self, step: int) -> float:
        return warmup_cosine(step, self.warmup_steps, self.decay_steps, self.min_lr_ratio)


class Constant(Schedule):
    """Linear warmup, then constant at the peak (min_lr_ratio and decay_steps unused)."""

    constant: ClassVar[bool] = True

    def multiplier(self, step: int) -> float:
        warm = self.warmup(step)
        return 1.0 if warm is None else warm


class Linear(Schedule):
    """Linear warmup, then linear decay to min_lr_ratio at decay_steps."""

    def multiplier(self, step: int) -> float:
        warm = self.warmup(step)
        if warm is not None:
            return warm
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.decay_steps - self.warmup_steps))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * (1.0 - progress)


class WarmupStableDecay(Schedule):
    """Warmup-stable-decay: warmup, the peak, then linear decay over the last decay_fraction of decay_steps.

    (Hu et al. 2024, MiniCPM; Hägele et al. 2024.) A run can be branched at any step of the stable phase and
    decayed there, which is what makes one run answer several token budgets. ``model.schedule_args``:
    ``decay_fraction`` (default 0.2)."""

    options: ClassVar[Mapping[str, Option]] = {"decay_fraction": Option(float, 0.0, 1.0, low_open=True)}

    def __init__(self, warmup_steps: int, decay_steps: int, min_lr_ratio: float, decay_fraction: float = 0.2) -> None:
        super().__init__(warmup_steps, decay_steps, min_lr_ratio)
        self.decay_fraction = float(decay_fraction)

    def multiplier(self, step: int) -> float:
        warm = self.warmup(step)
        if warm is not None:
            return warm
        decay_start = max(self.warmup_steps, self.decay_steps - round(self.decay_fraction * self.decay_steps))
        if step < decay_start:
            return 1.0
        progress = min(1.0, (step - decay_start) / max(1, self.decay_steps - decay_start))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * (1.0 - progress)
