"""Replicate noise: the same config and seed run twice, measured run against run.

A paired claim's per-seed differences already carry whatever two runs of one config and seed disagree by
(each arm is its own run), so replicate noise is inside every interval the comparison reports. What this
measures is how large it is beside the seed-to-seed spread, and what keeps it at zero: on one machine at one
thread count a fit is bit-identical whichever launcher forked it (tests/experiments/sweep/
test_warm_executor.py); across thread counts the matmuls split their sums differently and the runs drift
apart. ``scripts/replicate_spread.py`` prints the table docs/experiments.md quotes ("Noise").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from andrea_lab.runs.directory import parse_run_version, read_record


@dataclass(frozen=True)
class ReplicateRow:
    """One variant at one LR: the runs found in both directories, matched by seed."""

    variant: str
    lr: float
    pairs: int
    identical: int  # pairs whose scores are equal to the last bit
    max_abs_difference: float
    replicate_sd: float  # one run's replicate noise: sqrt(mean(d^2) / 2) over the pairs' differences d
    seed_sd: Optional[float]  # the spread across seeds of the first directory's runs (None below two seeds)


def run_score(run_dir: Path) -> Optional[float]:
    """A finished run's primary score: the document-weighted held-out loss, else the token-weighted one."""
    record = read_record(run_dir)
    if record is None or record.status not in ("finished", "diverged") or record.heldout is None:
        return None
    score = record.heldout.document_loss if record.heldout.document_loss is not None else record.heldout.loss
    return score if score is not None and math.isfinite(score) else None


def _scores(runs: Path) -> dict[tuple[str, float, int], float]:
    """``{(variant, lr, seed): score}`` for ``runs/<variant>/lr<lr>-seed<seed>/`` with a score."""
    scores = {}
    for run_dir in sorted(runs.glob("*/lr*-seed*")):
        parsed = parse_run_version(run_dir.name)
        score = run_score(run_dir) if parsed is not None and not run_dir.is_symlink() else None
        if score is not None:
            scores[(run_dir.parent.name, *parsed)] = score
    return scores


def replicate_rows(first: Path, second: Path) -> list[ReplicateRow]:
    """Per variant and LR, how the second directory's runs differ from the first's at the same seeds."""
    a, b = _scores(Path(first)), _scores(Path(second))
    rows = []
    for variant, lr in sorted({(variant, lr) for variant, lr, _ in a}):
        seeds = sorted(seed for name, rate, seed in a if (name, rate) == (variant, lr))
        paired = [(a[variant, lr, seed], b[variant, lr, seed]) for seed in seeds if (variant, lr, seed) in b]
        if not paired:
            continue
        differences = [y - x for x, y in paired]
        first_scores = [a[variant, lr, seed] for seed in seeds]
        rows.append(
            ReplicateRow(
                variant=variant,
                lr=lr,
                pairs=len(paired),
                identical=sum(x == y for x, y in paired),
                max_abs_difference=max(abs(d) for d in differences),
                replicate_sd=math.sqrt(sum(d * d for d in differences) / len(differences) / 2),
                seed_sd=statistics.stdev(first_scores) if len(first_scores) >= 2 else None,
            )
        )
    return rows
