"""Loss spikes and divergence, as plain state machines fed one loss at a time (no Lightning, no torch).

Both detectors are used by :class:`andrea_lab.fit.stability.monitor.StabilityMonitor` and are documented
in ``docs/stability.md``. Feeding them a synthetic sequence is all a test needs.

Spike
    ``loss_t > ema_{t-1} + threshold`` (nats), once ``warmup`` finite losses have been seen, where
    ``ema_t = decay·ema_{t-1} + (1-decay)·loss_t`` over the finite losses. Consecutive steps above the
    line are *one* spike (counted when the excursion starts). While the loss falls, as in early training,
    the EMA lags *above* it, so a falling curve never triggers.

Divergence (the first of these to happen; later evidence never replaces it)
    ``nonfinite``         a training loss that is NaN or ±inf;
    ``stuck_at_unigram``  after ``stuck_after`` steps, a smoothed training loss (EMA, ``stuck_decay``)
                          that stays at or above ``unigram_loss - stuck_margin`` for ``stuck_patience``
                          consecutive steps: the model has learnt no more than token frequencies. (A
                          post-norm ANDREA at too high a learning rate does exactly this without ever
                          producing a NaN.) The reported step is the first step of that stretch;
    ``blew_up``           a run not (yet) trained whose smoothed loss, after ``stuck_after`` steps, stays at
                          least ``blowup_margin`` above its first (smoothed) loss for ``stuck_patience``
                          consecutive steps: its loss went *up* from where it started (to 24-350 nats at a
                          peak LR of 1, against ln 257 = 5.55 at init), which is not learning only token
                          frequencies. Steps above that line do not count towards ``stuck_at_unigram`` (they
                          end its stretch); the reported step is the first step of the stretch above it;
    ``final_above_best``  at the end of the run, the final validation loss is at least
                          ``best + final_margin`` (nats);
    ``trained_then_diverged``  a run that *trained* -- its smoothed loss once fell ``trained_margin`` nats
                          below the unigram loss -- and then failed, after ``stuck_after`` steps: its smoothed
                          loss stayed at least ``rise_margin`` above its best for ``rise_patience``
                          consecutive steps (cause ``loss_rose``; the reported step, the onset, is the first
                          step of that stretch), or its loss turned non-finite (cause ``nonfinite``). A run
                          that trained is never called ``stuck_at_unigram``: going back to the plateau is
                          this kind, not that one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

from andrea_lab.runs import tags
from andrea_lab.runs.directory import (  # the kinds are the record's
    BLEW_UP,
    FINAL_ABOVE_BEST,
    LOSS_ROSE,
    NONFINITE,
    STUCK_AT_UNIGRAM,
    TRAINED_THEN_DIVERGED,
)
from andrea_lab.runs.outcome import OUTCOMES, TRAINED, Outcome, classify


def _finite(value: float) -> bool:
    return math.isfinite(value)


class SpikeDetector:
    """Count loss spikes: ``loss > EMA + threshold`` after a warm-in; one count per excursion.

    Args:
        threshold: How far above the EMA (in nats) a loss must be to be a spike.
        decay: EMA decay per step (0.95 ≈ a mean over the last 20 steps: short enough to follow the fast
            early fall of the loss, so that early spikes are seen too).
        warmup: Finite losses to see before any spike can be reported (the EMA needs a history).
    """

    def __init__(self, threshold: float = 0.5, decay: float = 0.95, warmup: int = 20):
        if not threshold > 0:
            raise ValueError(f"spike threshold must be > 0 nats, got {threshold!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1), got {decay!r}")
        if warmup < 1:
            raise ValueError(f"spike warm-in must be >= 1 step, got {warmup!r}")
        self.threshold = float(threshold)
        self.decay = float(decay)
        self.warmup = int(warmup)
        self.ema: Optional[float] = None
        self.seen = 0
        self.count = 0
        self.in_spike = False
        self.steps: list[int] = []  # the step at which each spike started

    def update(self, step: int, loss: float) -> bool:
        """Feed one training loss; return True when a new spike starts at this step."""
        loss = float(loss)
        if not _finite(loss):  # a divergence, not a spike; it must not poison the EMA either
            return False
        started = False
        if self.ema is not None and self.seen >= self.warmup:
            above = loss > self.ema + self.threshold
            started = above and not self.in_spike
            self.in_spike = above
            if started:
                self.count += 1
                self.steps.append(int(step))
        self.ema = loss if self.ema is None else self.decay * self.ema + (1.0 - self.decay) * loss
        self.seen += 1
        return started

    def state_dict(self) -> dict[str, Any]:
        return {
            "ema": self.ema,
            "seen": self.seen,
            "count": self.count,
            "in_spike": self.in_spike,
            "steps": list(self.steps),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ema, self.seen, self.count = state["ema"], state["seen"], state["count"]
        self.in_spike, self.steps = state["in_spike"], list(state["steps"])


@dataclass(frozen=True)
class Divergence:
    """When and how a run diverged (the ``divergence`` object of summary.json)."""

    step: int
    kind: str
    cause: Optional[str] = None  # for trained_then_diverged: loss_rose or nonfinite

    @property
    def stops_a_run(self) -> bool:
        """Whether ``stop_on_divergence`` may stop here: not at a trained run's rise, which is followed to the end.
        Whether a rise was a regression or a spike is known only then (andrea_lab.runs.outcome); stopped at its
        onset, every rise would be a regression by construction."""
        return self.cause != LOSS_ROSE

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        if found["cause"] is None:  # the record of the other kinds keeps its two keys
            del found["cause"]
        return found


class DivergenceDetector:
    """Decide whether (and when) a run diverged: non-finite loss, stuck at the unigram loss, or a final
    validation loss far above the best one. The first divergence found is kept.

    Args:
        unigram_loss: Cross-entropy of the best context-free (unigram) predictor of the training data,
            in nats; None disables the stuck check.
        stuck_after: Steps before which the stuck check does not count (let warmup happen).
        stuck_patience: Consecutive steps the smoothed loss must stay at/above the unigram level
            without improving.
        stuck_margin: Nats below the unigram loss that still count as "at" it; also the improvement
            (a fall of the smoothed loss below where the stretch began) that restarts the stretch.
            A run still descending towards the unigram level from ln(vocab) -- a slow one, at a low
            learning rate or a deep, narrow model -- is above that level for a while without being
            stuck: only a plateau counts.
        stuck_decay: EMA decay used to smooth the training loss for the stuck check.
        final_margin: Nats above the best validation loss that make the final one a divergence.
        trained_margin: Nats below the unigram loss the smoothed loss must once reach for the run to count
            as trained (from then on a failure is ``trained_then_diverged``, never ``stuck_at_unigram``).
        rise_margin: Nats above its best that the smoothed loss of a trained run must stay...
        rise_patience: ...for this many consecutive steps to be ``trained_then_diverged`` (cause ``loss_rose``).
            A spike that recovers within the patience is a spike, not a divergence.
        blowup_margin: Nats above the run's first loss: a run not yet trained whose smoothed loss stays above
            that line for ``stuck_patience`` steps ``blew_up``; steps above it are not "at the unigram level".
    """

    def __init__(
        self,
        unigram_loss: Optional[float] = None,
        stuck_after: int = 0,
        stuck_patience: int = 100,
        stuck_margin: float = 0.1,
        stuck_decay: float = 0.9,
        final_margin: float = 1.0,
        trained_margin: float = 0.5,
        rise_margin: float = 0.5,
        rise_patience: int = 50,
        blowup_margin: float = 1.0,
    ):
        if stuck_patience < 1:
            raise ValueError(f"stuck_patience must be >= 1 step, got {stuck_patience!r}")
        if stuck_after < 0:
            raise ValueError(f"stuck_after must be >= 0, got {stuck_after!r}")
        if not 0.0 <= stuck_decay < 1.0:
            raise ValueError(f"stuck EMA decay must be in [0, 1), got {stuck_decay!r}")
        if not final_margin > 0:
            raise ValueError(f"final_margin must be > 0 nats, got {final_margin!r}")
        if not trained_margin >= 0:
            raise ValueError(f"trained_margin must be >= 0 nats, got {trained_margin!r}")
        if not rise_margin > 0:
            raise ValueError(f"rise_margin must be > 0 nats, got {rise_margin!r}")
        if rise_patience < 1:
            raise ValueError(f"rise_patience must be >= 1 step, got {rise_patience!r}")
        if not blowup_margin > 0:
            raise ValueError(f"blowup_margin must be > 0 nats, got {blowup_margin!r}")
        self.unigram_loss = unigram_loss
        self.stuck_after = int(stuck_after)
        self.stuck_patience = int(stuck_patience)
        self.stuck_margin = float(stuck_margin)
        self.stuck_decay = float(stuck_decay)
        self.final_margin = float(final_margin)
        self.trained_margin = float(trained_margin)
        self.rise_margin = float(rise_margin)
        self.rise_patience = int(rise_patience)
        self.blowup_margin = float(blowup_margin)
        self.divergence: Optional[Divergence] = None
        self.best: Optional[float] = None  # the lowest smoothed loss so far
        self.rise_since: Optional[int] = None
        self.rise_steps = 0
        self.smoothed: Optional[float] = None
        self.stuck_since: Optional[int] = None
        self.stuck_steps = 0
        self.stuck_reference: Optional[float] = None  # the smoothed loss where the stretch began
        self.initial: Optional[float] = None  # the first smoothed loss: where the run started
        self.blowup_since: Optional[int] = None
        self.blowup_steps = 0
        # A declared rise, followed to the end: the best before it, its peak, when it came back, a non-finite after.
        self.rise_best: Optional[float] = None
        self.rise_peak: Optional[float] = None
        self.rise_back: Optional[int] = None
        self.rise_nonfinite: Optional[int] = None

    @property
    def diverged(self) -> bool:
        return self.divergence is not None

    @property
    def trained(self) -> bool:
        """Whether the smoothed loss has once been ``trained_margin`` below the unigram loss."""
        return (
            self.unigram_loss is not None
            and self.best is not None
            and self.best < self.unigram_loss - self.trained_margin
        )

    def _declare(self, step: int, kind: str, cause: Optional[str] = None) -> Divergence:
        if self.divergence is None:
            self.divergence = Divergence(int(step), kind, cause)
        return self.divergence

    def _declare_nonfinite(self, step: int) -> Divergence:
        return self._declare(step, TRAINED_THEN_DIVERGED, NONFINITE) if self.trained else self._declare(step, NONFINITE)

    def update(self, step: int, loss: float) -> Optional[Divergence]:
        """Feed one training loss; return the divergence if it is declared at this call."""
        if self.divergence is not None:
            self._follow_rise(step, float(loss))
            return None
        loss = float(loss)
        if not _finite(loss):
            return self._declare_nonfinite(step)
        self.smoothed = (
            loss if self.smoothed is None else (self.stuck_decay * self.smoothed + (1.0 - self.stuck_decay) * loss)
        )
        self.best = self.smoothed if self.best is None else min(self.best, self.smoothed)
        if self.initial is None:
            self.initial = self.smoothed
        if self.unigram_loss is None or step < self.stuck_after:
            return None
        if self.trained:
            return self._check_rise(step)
        if self.smoothed < self.unigram_loss - self.stuck_margin:
            self.stuck_since, self.stuck_steps, self.stuck_reference = None, 0, None
            self.blowup_since, self.blowup_steps = None, 0
            return None
        if self.initial is not None and self.smoothed >= self.initial + self.blowup_margin:
            return self._check_blowup(step)
        self.blowup_since, self.blowup_steps = None, 0
        if self.stuck_since is None or self.smoothed < self.stuck_reference - self.stuck_margin:
            # A new stretch at/above the unigram level, or one that is still improving: (re)start it.
            self.stuck_since, self.stuck_steps, self.stuck_reference = int(step), 0, self.smoothed
        self.stuck_steps += 1
        if self.stuck_steps >= self.stuck_patience:
            return self._declare(self.stuck_since, STUCK_AT_UNIGRAM)
        return None

    def _check_blowup(self, step: int) -> Optional[Divergence]:
        """A run not yet trained, its smoothed loss ``blowup_margin`` above where it started: not at the unigram
        level (the stuck stretch ends), and ``blew_up`` once it has stayed there ``stuck_patience`` steps."""
        self.stuck_since, self.stuck_steps, self.stuck_reference = None, 0, None
        if self.blowup_since is None:
            self.blowup_since = int(step)
        self.blowup_steps += 1
        if self.blowup_steps >= self.stuck_patience:
            return self._declare(self.blowup_since, BLEW_UP)
        return None

    def _check_rise(self, step: int) -> Optional[Divergence]:
        """A trained run's smoothed loss held ``rise_margin`` above its best for ``rise_patience`` steps."""
        assert self.smoothed is not None and self.best is not None
        if self.smoothed < self.best + self.rise_margin:
            self.rise_since, self.rise_steps = None, 0
            return None
        if self.rise_since is None:
            self.rise_since = int(step)
        self.rise_steps += 1
        if self.rise_steps >= self.rise_patience:
            self.rise_best, self.rise_peak = self.best, self.smoothed
            return self._declare(self.rise_since, TRAINED_THEN_DIVERGED, LOSS_ROSE)
        return None

    def _follow_rise(self, step: int, loss: float) -> None:
        """After a rise's onset, keep following it: whether it comes back within ``rise_margin`` of the best
        before it, how high it went, and whether it then turns non-finite. Only the end of the run says whether
        a rise was a regression or a spike (andrea_lab.runs.outcome), so the record keeps what it did."""
        if self.rise_best is None or self.smoothed is None:
            return
        if not _finite(loss):
            self.rise_nonfinite = int(step) if self.rise_nonfinite is None else self.rise_nonfinite
            return
        self.smoothed = self.stuck_decay * self.smoothed + (1.0 - self.stuck_decay) * loss
        self.rise_peak = max(self.rise_peak, self.smoothed)
        if self.rise_back is None and self.smoothed < self.rise_best + self.rise_margin:
            self.rise_back = int(step)

    @property
    def rise(self) -> Optional[dict[str, Any]]:
        """The rise that was declared, as followed: ``{"size", "length", "nonfinite_step"}`` (``size``: its
        smoothed peak above the best before it, nats; ``length``: steps from onset until back within
        ``rise_margin`` of that best, None if it never came back); None without a rise."""
        if self.rise_best is None or self.divergence is None:
            return None
        length = None if self.rise_back is None else self.rise_back - self.divergence.step
        size = round(self.rise_peak - self.rise_best, 6)
        return {"size": size, "length": length, "nonfinite_step": self.rise_nonfinite}

    def nonfinite(self, step: int) -> Optional[Divergence]:
        """Report a non-finite value other than the loss (e.g. the gradient norm) at ``step``."""
        if self.divergence is not None:
            if self.rise_best is not None and self.rise_nonfinite is None:
                self.rise_nonfinite = int(step)
            return None
        return self._declare_nonfinite(step)

    def check_final(
        self, step: int, final_val_loss: Optional[float], best_val_loss: Optional[float]
    ) -> Optional[Divergence]:
        """At the end of a run: non-finite final validation loss, or ``final >= best + final_margin``."""
        if self.divergence is not None or final_val_loss is None:
            return None
        if not _finite(final_val_loss):
            return self._declare_nonfinite(step)
        if best_val_loss is not None and final_val_loss >= best_val_loss + self.final_margin:
            return self._declare(step, FINAL_ABOVE_BEST)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {
            "divergence": None if self.divergence is None else self.divergence.as_dict(),
            "smoothed": self.smoothed,
            "stuck_since": self.stuck_since,
            "stuck_steps": self.stuck_steps,
            "stuck_reference": self.stuck_reference,
            "initial": self.initial,
            "blowup_since": self.blowup_since,
            "blowup_steps": self.blowup_steps,
            "best": self.best,
            "rise_since": self.rise_since,
            "rise_steps": self.rise_steps,
            "followed_rise": [self.rise_best, self.rise_peak, self.rise_back, self.rise_nonfinite],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        found = state.get("divergence")
        self.divergence = None if found is None else Divergence(found["step"], found["kind"], found.get("cause"))
        self.smoothed, self.stuck_since, self.stuck_steps = (
            state["smoothed"],
            state["stuck_since"],
            state["stuck_steps"],
        )
        # Checkpoints from before the improvement rule: the stretch's start is the best reference known.
        self.stuck_reference = state.get("stuck_reference", self.smoothed if self.stuck_since is not None else None)
        # Checkpoints from before the blow-up rule: no first loss known, so such a run is judged as it was then.
        self.initial = state.get("initial")
        self.blowup_since, self.blowup_steps = state.get("blowup_since"), int(state.get("blowup_steps", 0))
        # Checkpoints from before the trained-then-diverged rule: the smoothed loss is the best one known.
        self.best = state.get("best", self.smoothed)
        self.rise_since, self.rise_steps = state.get("rise_since"), int(state.get("rise_steps", 0))
        # Checkpoints from before a rise was followed: its onset is all that is known (classify reads final/best).
        self.rise_best, self.rise_peak, self.rise_back, self.rise_nonfinite = state.get("followed_rise", [None] * 4)


def divergence_flags(divergence: Optional[Divergence]) -> dict[str, float]:
    """The 0/1 divergence flags of TensorBoard: diverged at all, stuck at the unigram loss, blew up before it
    trained, trained then diverged."""
    kind = None if divergence is None else divergence.kind
    return {
        tags.DIVERGED: float(divergence is not None),
        tags.STUCK: float(kind == STUCK_AT_UNIGRAM),
        tags.BLEW_UP: float(kind == BLEW_UP),
        tags.TRAINED_THEN_DIVERGED: float(kind == TRAINED_THEN_DIVERGED),
    }


def record_outcome(
    detector: DivergenceDetector,
    initial: Optional[float],
    best: Optional[float],
    last_validation: tuple[Optional[int], Optional[float]],
    interrupted: bool,
) -> tuple[Optional[Divergence], Outcome]:
    """The run's divergence as its record keeps it (after the end-of-fit check of the final validation loss,
    ``(step, loss)``) and its outcome (andrea_lab.runs.outcome). A rise that came back by the end of a run that
    ran to it is a spike, not a divergence: the record then keeps no divergence (the outcome keeps the rise), so
    the run is ``finished`` and no count takes it for a failure."""
    final_step, final = last_validation
    if final is not None and not interrupted:
        detector.check_final(final_step, final, best)
    divergence = detector.divergence
    if divergence is None:
        return None, Outcome(TRAINED)
    outcome = classify(divergence.kind, divergence.cause, divergence.step, initial, best, final, detector.rise)
    if outcome.kind == TRAINED and not interrupted:
        return None, outcome
    return divergence, outcome


def outcome_flags(outcome: dict[str, Any]) -> dict[str, float]:
    """The TensorBoard scalars of a run's outcome (summary.json ``outcome``, andrea_lab.runs.outcome): a 0/1 flag
    per outcome, whether a rise recovered, and the size in nats where the outcome has one; {} without one."""
    kind = outcome.get("kind")
    if kind is None:
        return {}
    flags = {f"{tags.OUTCOME}/{name}": float(kind == name) for name in OUTCOMES}
    flags[f"{tags.OUTCOME}/recovered_rise"] = float(bool(outcome.get("rise")))
    if outcome.get("size") is not None:
        flags[f"{tags.OUTCOME}/size"] = float(outcome["size"])
    return flags


def unigram_entropy(counts) -> float:
    """Entropy (nats) of the token distribution given by ``counts``: the loss of the best model that
    ignores context. ``counts`` is any sequence of non-negative counts (e.g. a ``bincount``)."""
    total = float(sum(float(c) for c in counts))
    if total <= 0:
        raise ValueError("unigram entropy of an empty token sample")
    entropy = 0.0
    for c in counts:
        c = float(c)
        if c > 0:
            p = c / total
            entropy -= p * math.log(p)
    return entropy
