"""Effects in steps from separately planned runs: the shortest planned run of B that reaches A's final loss.

:mod:`andrea_lab.experiments.compare.steps` reads a step count off one run's curve, which under a cosine or
WSD schedule is not what a run planned to end there would score (its LR has not decayed yet). A suite that
plans each token budget as its own run (the schedule ends at each budget, issue 55) can answer the question
without that caveat: A's final loss at its budget is the target, and B's effect is the shortest of B's own
planned budgets whose final loss is at or below it. The answer is a bracket, not a point: B needed more
steps than the longest of its budgets that missed the target and at most the shortest that reached it, so
both are reported; a target none of B's budgets reached is said so rather than given a number.

Per seed, paired (the same seed's runs of A and B); the losses are each run's final held-out loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

#: One variant's runs: planned steps -> seed -> final held-out loss.
PlannedLosses = Mapping[int, Mapping[int, float]]


@dataclass(frozen=True)
class Reach:
    """Where B reached A's final loss at A's budget, for one seed: B's planned steps that reached it
    (``reached``, None if none did) and the longest shorter budget that did not (``missed``, None if the
    shortest already reached it); ``ratio`` = reached / A's steps."""

    seed: int
    a_steps: int
    target: float
    reached: Optional[int]
    missed: Optional[int]

    @property
    def ratio(self) -> Optional[float]:
        return None if self.reached is None else self.reached / self.a_steps

    def describe(self) -> str:
        if self.reached is None:
            return f"seed {self.seed}: no planned run of B reached A's {self.target:.4f} at {self.a_steps} steps"
        low = "fewer" if self.missed is None else f"more than {self.missed}"
        return (
            f"seed {self.seed}: B reached A's {self.target:.4f} ({self.a_steps} steps) in at most {self.reached} "
            f"planned steps ({low}; x{self.ratio:.2f})"
        )


def shortest_reaching(b: PlannedLosses, seed: int, target: float) -> tuple[Optional[int], Optional[int]]:
    """(the shortest of B's planned budgets at ``seed`` whose final loss is at or below ``target``, the
    longest shorter budget that missed it); budgets without this seed's run are skipped."""
    missed = None
    for steps in sorted(b):
        loss = b[steps].get(seed)
        if loss is None:
            continue
        if loss <= target:
            return steps, missed
        missed = steps
    return None, missed


def planned_reach(a: PlannedLosses, b: PlannedLosses, a_steps: int) -> list[Reach]:
    """For each seed A has at ``a_steps``: the shortest planned run of B reaching A's final loss there."""
    if a_steps not in a:
        raise ValueError(f"A has no planned run of {a_steps} steps; its budgets: {sorted(a)}")
    reaches = []
    for seed, target in sorted(a[a_steps].items()):
        reached, missed = shortest_reaching(b, seed, target)
        reaches.append(Reach(seed, a_steps, target, reached, missed))
    return reaches
