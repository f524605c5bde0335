"""The sign-flip (randomisation) test of paired per-seed differences, exact where it can be.

Under "no difference" each seed's difference A − B is as likely positive as negative, so the p-value is the
share of the 2^n sign assignments whose |sum| is at least the observed one: no normal distribution assumed,
which with 3-10 seeds the t-test must. Up to :data:`EXACT_FLIPS_MAX_SEEDS` seeds all 2^n are enumerated (a
column called "exact" must be exact: at 20 seeds all one way, 2/2^20 = 1.907e-06, where 200,000 random flips
read 5e-06); above, a sampled p says so, with its Monte Carlo error and the +1 correction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from andrea_lab.experiments.compare.floors import exact_floor

#: Up to this many seeds every one of the 2^n sign assignments is enumerated (2^20 = 1,048,576 sums, built as
#: the outer sum of two halves' partial sums: 8 MB, well under a second); above it the p is estimated from
#: RANDOM_FLIPS seeded draws and labelled sampled, with its Monte Carlo error.
EXACT_FLIPS_MAX_SEEDS, RANDOM_FLIPS = 20, 200_000
#: At most this many signs in memory at once (8 MB): 200,000 flips of a handed table's 6,000 seeds were 9.6 GB.
FLIP_CELLS = 1_000_000


#: The observed |mean| is scaled by this before counting flips at least as extreme: a flip that ties with it
#: (the identity among them) counts, whatever the rounding of its sum.
AS_EXTREME = 1 - 1e-12


@dataclass(frozen=True)
class SignFlipP:
    """A sign-flip p and how it was found: ``sampled`` False means all 2^n flips were enumerated (the p is
    exact); True means ``draws`` random flips with the +1 correction, ``(hits + 1) / (draws + 1)`` (the observed
    assignment is one of the draws, so an estimate is never 0), and ``error`` its Monte Carlo standard error."""

    p: float
    floor: float
    sampled: bool = False
    draws: int = 0
    error: float = math.nan

    def describe(self) -> str:
        """``1.91e-06 exact`` or ``5e-06 sampled (± 5e-06, 200,000 flips)``."""
        if math.isnan(self.p):
            return "n/a"
        if not self.sampled:
            return f"{self.p:.3g} exact"
        return f"{self.p:.3g} sampled (± {self.error:.1g}, {self.draws:,} flips)"


def every_sign_flip(n: int) -> np.ndarray:
    """All 2^n assignments of signs to n paired differences, ``(2^n, n)`` of +1/-1."""
    return 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)


def every_signed_sum(values: np.ndarray) -> np.ndarray:
    """The sums ``Σ s_i · v_i`` over all 2^n sign vectors s, flat: the outer sum of the 2^(n/2) partial sums of
    each half, so that 20 seeds need two tables of 1,024 sums instead of a (2^20, 20) sign matrix."""
    half = len(values) // 2
    low, high = values[:half], values[half:]
    low_sums = (every_sign_flip(len(low)) * low).sum(axis=1) if len(low) else np.zeros(1)
    high_sums = (every_sign_flip(len(high)) * high).sum(axis=1)
    return (low_sums[:, None] + high_sums[None, :]).ravel()


def sign_flip_test(differences: Sequence[float]) -> SignFlipP:
    """Two-sided randomisation p of the paired differences' mean against 0, with the smallest p the test can
    give with this many seeds and whether it was enumerated or sampled.

    Under "no difference" each per-seed difference is as likely positive as negative, so the p-value is the
    share of the 2^n sign assignments whose |mean| is at least the observed one. It assumes no normal
    distribution, which with 3-10 seeds the t-test must; but it cannot go below 2 / 2^n (0.25 with 3 seeds,
    0.0625 with 5): with fewer than 6 seeds no verdict at 0.05 can rest on it. NaN without differences."""
    values = np.asarray([float(d) for d in differences if not math.isnan(float(d))])
    n = len(values)
    if n == 0:
        return SignFlipP(math.nan, math.nan)
    floor = exact_floor(n)
    observed = abs(values.sum()) * AS_EXTREME
    if n <= EXACT_FLIPS_MAX_SEEDS:
        return SignFlipP(float(np.mean(np.abs(every_signed_sum(values)) >= observed)), floor)
    rng, extreme = np.random.default_rng(0), 0
    rows = max(1, min(RANDOM_FLIPS, FLIP_CELLS // n))  # flips drawn a block at a time: memory bounded by seeds
    for start in range(0, RANDOM_FLIPS, rows):
        signs = rng.choice([-1, 1], size=(min(rows, RANDOM_FLIPS - start), n))
        extreme += int(np.sum(np.abs(signs @ values) >= observed))
    p = (extreme + 1) / (RANDOM_FLIPS + 1)
    return SignFlipP(p, floor, True, RANDOM_FLIPS, math.sqrt(p * (1 - p) / RANDOM_FLIPS))


def sign_flip_p(differences: Sequence[float]) -> tuple[float, float]:
    """``(p, floor)`` of :func:`sign_flip_test` (exact up to :data:`EXACT_FLIPS_MAX_SEEDS` seeds)."""
    found = sign_flip_test(differences)
    return found.p, found.floor
