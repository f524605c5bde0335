"""Fewer than 3 seeds decide nothing: the words a claim's row or a variant's line reads instead of a verdict.

Why not the verdict with a caveat after it: a bold "contradicted" from 2 seeds is read as a verdict whatever
follows it (issue 60, a user's own suite). With n < 3 a 95 % interval is as wide as the t distribution with one
degree of freedom makes it and the exact sign-flip p cannot go below 0.5, so the estimate's side is a lead for
more seeds, not a finding.
"""

from __future__ import annotations

from andrea_lab.experiments.compare.stats import MIN_SEEDS

#: How an outcome from too few seeds starts (a claims table, the project table, a verdict line).
TOO_FEW = "too few seeds"


def too_few_seeds(n: int) -> bool:
    """Whether ``n`` paired seeds are too few for a verdict (at least one, fewer than :data:`MIN_SEEDS`)."""
    return 0 < n < MIN_SEEDS


def lead_only(n: int) -> str:
    """``too few seeds (n=2) — lead only``."""
    return f"{TOO_FEW} (n={n}) — lead only"


def is_too_few(outcome: str) -> bool:
    return outcome.startswith(TOO_FEW)
