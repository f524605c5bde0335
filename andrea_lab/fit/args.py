"""AndreaLM's training arguments (optimizer, schedule, loss, non-finite policy, compile) as one validated value.

The arguments stay flat parameters of ``AndreaLM.__init__`` -- they are the ``model.lr``,
``model.warmup_steps``, ... keys of every experiment YAML, of the committed suites and of the
hyperparameters stored in every checkpoint. This dataclass is what the module works with: built from the
arguments passed by name, saved as ``save_hyperparameters({"config": ..., **asdict(args)})`` and read back from
a checkpoint's hyperparameters by field name (:meth:`TrainingArgs.from_arguments`); checked once, here, with one
:class:`ConfigError` naming the first bad value and what is valid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, Optional

from andrea_lab.model.config import ConfigError

#: The most steps a count of steps may say: no run takes more, and a larger count (1e21) overflowed the int64
#: columns of the tables ``andrea compare`` builds from a run's hyperparameters.
MAX_STEPS = 10**12


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _steps(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_STEPS


@dataclass(frozen=True)
class TrainingArgs:
    """How AndreaLM trains (the meaning of each field: ``AndreaLM``'s docstring, which ``--help`` shows).

    ``betas`` is the pair the optimizer gets: ``beta2``, when set, has already replaced its second number, and
    stays recorded beside it."""

    lr: float
    warmup_steps: int
    decay_steps: Optional[int]
    min_lr_ratio: float
    weight_decay: float
    betas: tuple[float, float]
    eps: float
    on_nonfinite: Literal["stop", "skip"]
    max_skipped_steps: int
    compile: bool
    z_loss: float
    #: The optimizer and schedule plugins (names in ``andrea_lab.optimizer``/``andrea_lab.schedule``) and their
    #: own options; defaults for a checkpoint saved before they existed (which trained with these).
    optimizer: str = "adamw"
    schedule: Optional[str] = None
    optimizer_args: dict[str, Any] = field(default_factory=dict)
    schedule_args: dict[str, Any] = field(default_factory=dict)
    #: Replaces ``betas[1]`` when set: a search tunes one number per key, and ``betas`` is a pair. Last, as every
    #: argument added since the first checkpoints: the saved hyperparameters keep their old order, then the new.
    beta2: Optional[float] = None

    def __post_init__(self) -> None:
        if self.beta2 is not None and not (_finite(self.beta2) and 0.0 <= self.beta2 < 1.0):
            raise ConfigError(f"beta2 must be a number in [0, 1) or null, got {self.beta2!r}")
        betas = tuple(self.betas)
        if self.beta2 is not None and len(betas) == 2:
            betas = (betas[0], float(self.beta2))
        object.__setattr__(self, "betas", betas)
        for name in ("optimizer_args", "schedule_args"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigError(f"{name} must be a mapping of the plugin's options (or null), got {value!r}")
            object.__setattr__(self, name, dict(value or {}))
        checks = [
            (_finite(self.lr) and self.lr > 0, f"lr must be a finite number > 0, got {self.lr!r}"),
            (
                _steps(self.warmup_steps, 0),
                f"warmup_steps must be an integer in [0, {MAX_STEPS:.0e}], got {self.warmup_steps!r}",
            ),
            (
                self.decay_steps is None or _steps(self.decay_steps, 1),
                f"decay_steps must be an integer in [1, {MAX_STEPS:.0e}] or null, got {self.decay_steps!r}",
            ),
            (0.0 <= self.min_lr_ratio <= 1.0, f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}"),
            (self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay!r}"),
            (
                len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
                f"betas must be two numbers in [0, 1), got {self.betas!r}",
            ),
            (self.eps > 0, f"eps must be > 0, got {self.eps!r}"),
            (
                _finite(self.z_loss) and self.z_loss >= 0,
                f"z_loss must be a finite number >= 0 (0 = off; PaLM uses 1e-4), got {self.z_loss!r}",
            ),
            (
                self.on_nonfinite in ("stop", "skip"),
                f"on_nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}",
            ),
            (
                _steps(self.max_skipped_steps, 0),
                f"max_skipped_steps must be an integer in [0, {MAX_STEPS:.0e}], got {self.max_skipped_steps!r}",
            ),
            (isinstance(self.compile, bool), f"compile must be true or false, got {self.compile!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> "TrainingArgs":
        """The fields' values out of a mapping that holds other keys too (a checkpoint's hyperparameters); a field
        with a default may be missing (a checkpoint saved before it existed)."""
        return cls(
            **{
                f.name: arguments[f.name]
                for f in fields(cls)
                if f.name in arguments or (f.default is MISSING and f.default_factory is MISSING)
            }
        )
