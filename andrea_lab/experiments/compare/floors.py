"""The smallest p-value a claim's exact test can give with a suite's seeds, known before any run.

Two claim kinds are judged by exact tests on few pairs: the counts (``fewer_divergences``, ``fewer_stuck``,
``fewer_regressions``, ``fewer_blowups``) by an exact two-sided McNemar test on the runs paired by (LR, seed),
``higher_ceiling`` by the exact sign-flip test over seeds. Neither can go below 2 / 2^n with n pairs (every
pair discordant one way, or every seed's difference of one sign). A count claim at an LR fixed in advance
pairs one run per seed, so with 5 seeds its p is at least 0.0625 and it can never be a verdict at 0.05, however
clearly its runs come out: depth_confirm's three such claims (post-24 stuck 5/5 against pre-24 0/5 at one LR)
joined the project-wide Holm family without a chance and raised the bar for every other claim. ``andrea sweep``
says so before the first run, when seeds can
still be added (:func:`unconfirmable_claims`)."""

from __future__ import annotations

import math
from typing import Optional

from andrea_lab.experiments.compare.claim_spec import COUNT_KINDS, Claim, parse_claims
from andrea_lab.runs.directory import format_lr

#: The level a verdict needs (before any multiplicity adjustment, which only raises the bar).
VERDICT_LEVEL = 0.05


def exact_floor(pairs: int) -> float:
    """2 / 2^pairs, at most 1: the smallest two-sided p of an exact test on ``pairs`` paired signs (the
    sign-flip test over seeds, McNemar's over discordant pairs), reached when every sign is the same. Here, not
    in stats, so that ``andrea sweep`` can say it without importing pandas and scipy."""
    return min(1.0, math.ldexp(1.0, 1 - pairs))  # without an int too large for a float


def smallest_p(claim: Claim, seeds: int, shared_lrs: int) -> Optional[float]:
    """2 / 2^pairs for the claims judged by an exact test on few pairs, None for the others (a t-test on
    losses has no floor). ``shared_lrs``: LRs both variants run at (the McNemar pairs over a grid)."""
    if claim.kind in COUNT_KINDS:
        pairs = seeds if claim.lrs is not None else seeds * shared_lrs
    elif claim.kind == "higher_ceiling":
        pairs = seeds
    else:
        return None
    return exact_floor(pairs)


def unconfirmable_claims(suite, level: float = VERDICT_LEVEL) -> list[str]:
    """One line per claim of ``suite`` (a :class:`~andrea_lab.experiments.sweep.suite.Suite`) whose exact test
    cannot reach ``level`` with the suite's seeds, naming the seeds that would."""
    lines = []
    for claim in parse_claims(list(suite.claims)) if suite.claims else []:
        shared = {format_lr(lr) for lr in suite.lrs_of(suite.variant(claim.a))} & {
            format_lr(lr) for lr in suite.lrs_of(suite.variant(claim.b))
        }
        floor = smallest_p(claim, len(suite.seeds), len(shared))
        if floor is None or floor < level:
            continue
        if claim.kind == "higher_ceiling":
            test = "exact sign-flip test has one LR ceiling per seed"
        elif claim.lrs is not None:
            test = "exact McNemar test pairs one run per seed at its fixed LR"
        else:
            test = f"exact McNemar test pairs runs by (LR, seed) over {len(shared)} shared LRs"
        needed = len(suite.seeds) + 1
        while smallest_p(claim, needed, len(shared)) >= level:
            needed += 1
        lines.append(
            f"claim {claim.label} cannot reach p < {level:g} with {len(suite.seeds)} seeds: its {test}, so its "
            f"smallest possible p is {floor:.3g}, whatever the runs show; {needed} seeds could"
        )
    return lines
