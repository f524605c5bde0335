"""Multiplicity: a suite's claims are judged as one family, with Holm's step-down adjustment.

Why: ``norm_placement`` alone states eight claims; at 5 % each, the chance that at least one true null
comes out "reproduced" or "contradicted" is far above 5 %. Holm (1979) keeps that family-wise error at
5 % under any dependence between the claims (they share runs, so they are dependent) and is uniformly
more powerful than Bonferroni. A claim marked ``exploratory: true`` in the suite file stays out of the
family and is judged on its raw p, labelled as such.

statsmodels is not a dependency, so the adjustment is the few lines below; its known answer
(R's ``p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm")`` = 0.03, 0.06, 0.06, 0.02) is in
tests/experiments/compare/test_multiplicity.py.
"""

from __future__ import annotations

import math
from typing import Sequence


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: sorted ascending, the i-th smallest of m is multiplied by
    m − i (i from 0), made non-decreasing along the sorted order, and capped at 1. A NaN p (a test with no
    evidence, e.g. one seed) counts as 1: it keeps its place in the family and rejects nothing."""
    values = [1.0 if p is None or math.isnan(p) else float(p) for p in p_values]
    m = len(values)
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: values[i])):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return adjusted
