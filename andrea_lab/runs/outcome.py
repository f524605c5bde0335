"""How a run ended, as one of three failures that are different things, or trained (summary.json ``outcome``).

The divergence record (``divergence.kind``, docs/stability.md) says what a detector saw first while the run went
on; a verdict needs what the run *was*. "Diverged" mixed three outcomes that a paper's claim is about one of:

``stuck``
    it never left the unigram plateau (``stuck_at_unigram``): slowness at that learning rate, learnt no more
    than token frequencies. ``step``: where the plateau began.
``regressed``
    it trained, then its loss rose and stayed above its best to the end (``trained_then_diverged`` by a rise,
    or ``final_above_best``). ``step``: the onset of the rise; ``size``: final − best validation loss (nats),
    what the rise still cost at the end.
``blew_up``
    its loss or gradient went non-finite (before or after it trained), or its loss climbed well above where it
    started and stayed there (``blew_up``), or a trained run's rise peaked :data:`EXPLODED_MARGIN` above its
    initial loss: the blow-up of Xiong et al. or Wortsman et al. ``step``: where; ``size``: final (or the rise's
    peak) − initial loss (nats) where known, None for non-finite.
``trained``
    none of these. A rise that came back to within :data:`RECOVERED_MARGIN` of its best by the end is a spike,
    not a divergence: ``rise`` records it (onset ``step``, ``size`` in nats above the best before it and
    ``length`` in steps until it was back, where the run's monitor followed it; None where only its onset is
    known, as in the runs.csv of runs made before this record).

Pure functions of a record's fields, so that ``andrea compare`` re-reads runs.csv files written before the
record had ``outcome`` exactly as a fit now writes it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

from andrea_lab.runs.directory import BLEW_UP as BLEW_UP_KIND
from andrea_lab.runs.directory import FINAL_ABOVE_BEST, LOSS_ROSE, NONFINITE, STUCK_AT_UNIGRAM, TRAINED_THEN_DIVERGED

TRAINED = "trained"
STUCK = "stuck"
REGRESSED = "regressed"
BLEW_UP = "blew_up"
#: A run recorded as diverged without a kind (a table from before the kinds were kept): a failure, of no known name.
UNNAMED = "diverged"
#: The failures: what a divergence count counts (a recovered rise is none of them).
FAILURES = (STUCK, REGRESSED, BLEW_UP, UNNAMED)
OUTCOMES = (TRAINED, *FAILURES)
#: A run whose final validation loss is within this many nats of its best has come back from a rise (the
#: stuck check's margin: what the monitor already calls "at" a level). The committed rises are either back
#: exactly (final = best: instability.yaml's QK-norm runs at LR 0.3) or still 0.25-0.5 nats up at the end.
RECOVERED_MARGIN = 0.1
#: A trained run's rise whose (smoothed) peak went this many nats above the run's initial loss exploded: a
#: blow-up, whether or not it came back (the monitor's ``blowup_margin`` for a run that never trained). Known only
#: where the monitor followed the rise (its ``size``); a runs.csv row from before has no peak.
EXPLODED_MARGIN = 1.0


@dataclass(frozen=True)
class Outcome:
    """One run's outcome; ``rise`` only for a run that trained and came back from a rise (a spike)."""

    kind: str
    step: Optional[int] = None
    size: Optional[float] = None
    rise: Optional[dict[str, Any]] = None

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """``regressed +0.354 nat from step 1034``, ``stuck from step 150``, ``blew up (non-finite) at step 80``,
        ``trained (a rise from step 924 recovered)``."""
        at = "" if self.step is None else f" at step {self.step}"
        if self.kind == STUCK:
            return "stuck" + ("" if self.step is None else f" from step {self.step}")
        if self.kind == REGRESSED:
            size = "" if self.size is None else f" {self.size:+.3f} nat"
            return f"regressed{size}" + ("" if self.step is None else f" from step {self.step}")
        if self.kind == BLEW_UP:
            return ("blew up (non-finite)" if self.size is None else f"blew up {self.size:+.3f} nat") + at
        if self.rise:
            return f"trained (a rise from step {self.rise['step']} recovered)"
        return "trained"


def _finite(value: Any) -> Optional[float]:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _text(value: Any) -> Optional[str]:
    """A record's kind or cause: None for a missing one (None, NaN, or an empty CSV cell)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return None
    return str(value)


def _step(value: Any) -> Optional[int]:
    found = _finite(value)
    return None if found is None else int(found)


def classify(
    kind: Optional[str],
    cause: Optional[str] = None,
    step: Any = None,
    initial_loss: Any = None,
    best_loss: Any = None,
    final_loss: Any = None,
    rise: Optional[dict[str, Any]] = None,
) -> Outcome:
    """The outcome of a run from its divergence record (``kind``, ``cause``, ``step``) and its validation
    losses; ``rise`` is what the monitor followed after a rise's onset (``size``, ``length``, ``nonfinite_step``;
    None where unknown). A kind outside the record's list is a ValueError naming it."""
    kind, cause = _text(kind), _text(cause)
    at = _step(step)
    initial, best, final = _finite(initial_loss), _finite(best_loss), _finite(final_loss)
    if kind is None:
        return Outcome(TRAINED)
    if kind == STUCK_AT_UNIGRAM:
        return Outcome(STUCK, at)
    if kind == NONFINITE or cause == NONFINITE:
        return Outcome(BLEW_UP, at)
    if kind == BLEW_UP_KIND:
        return Outcome(BLEW_UP, at, None if final is None or initial is None else round(final - initial, 6))
    rose = kind == TRAINED_THEN_DIVERGED and cause in (None, LOSS_ROSE)
    if not rose and kind != FINAL_ABOVE_BEST:
        raise ValueError(
            f"divergence kind {kind!r} (cause {cause!r}) has no outcome; expected one of {STUCK_AT_UNIGRAM}, "
            f"{NONFINITE}, {BLEW_UP_KIND}, {TRAINED_THEN_DIVERGED} ({LOSS_ROSE} or {NONFINITE}), {FINAL_ABOVE_BEST}"
        )
    followed = rise or {}
    if followed.get("nonfinite_step") is not None:  # it rose, then went non-finite: a blow-up after all
        return Outcome(BLEW_UP, _step(followed["nonfinite_step"]))
    peak = None if best is None or _finite(followed.get("size")) is None else best + _finite(followed["size"])
    if peak is not None and initial is not None and peak >= initial + EXPLODED_MARGIN:
        return Outcome(BLEW_UP, at, round(peak - initial, 6))  # it went far above where it started, then or not back
    regression = None if final is None or best is None else final - best
    if regression is not None and regression < RECOVERED_MARGIN:
        return Outcome(TRAINED, rise={"step": at, "size": followed.get("size"), "length": followed.get("length")})
    return Outcome(REGRESSED, at, None if regression is None else round(regression, 6))
