"""Which learning rate a comparison judges each seed at: chosen on the *other* seeds, or fixed in advance.

The winner's curse: a variant's best LR chosen by the mean over the very seeds that are then compared
favours it on exactly those seeds. Far from a divergence cliff that is a small bias; at one it is not:
``norm_placement``'s post − post-nowarmup is +0.195 [+0.143, +0.248] in-sample and +0.067 [−0.330,
+0.464] with each seed's LRs chosen on the other four (seed 1 of post-nowarmup lands on 4e-3, where it
sticks at the unigram level; shared/design/STATISTICS.md, docs/experiments.md).

Cross-fitting (leave-one-seed-out): for seed s, each variant's LR is
:func:`andrea_lab.experiments.compare.stats.best_lr`
over every other seed of the pair, and s's difference is taken at those LRs, so no seed's own loss
chooses the LR it is judged at. The per-seed differences are then a paired-t interval as before. The
alternative that needs no selection at all is an LR fixed before the runs (a claim's ``lr:``), as in
``experiments/suites/norm_placement_confirm.yaml``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Mapping

from andrea_lab.experiments.compare.stats import difference_at, held_out_best_lrs, values_at  # noqa: F401 (the cross-fit, in stats)
from andrea_lab.runs.directory import format_lr


def fixed_lrs(lr: float, seeds) -> dict[int, float]:
    """Every seed at the one LR fixed in advance (no selection)."""
    return {int(seed): float(lr) for seed in seeds}


def describe_picks(name: str, lrs: Mapping[int, float]) -> str:
    """``pre 4e-3`` when every seed got the same LR, else the commonest with the exceptions:
    ``post-nowarmup 2e-3 (seed 1: 4e-3)``."""
    chosen = {seed: lr for seed, lr in lrs.items() if not math.isnan(lr)}
    if not chosen:
        return f"{name} none (too few seeds to choose on others)"
    common = Counter(chosen.values()).most_common(1)[0][0]
    exceptions = [f"seed {seed}: {format_lr(lr)}" for seed, lr in sorted(chosen.items()) if lr != common]
    return f"{name} {format_lr(common)}" + (f" ({', '.join(exceptions)})" if exceptions else "")
