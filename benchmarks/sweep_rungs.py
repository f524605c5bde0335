"""The rungs ``benchmarks/sweep_throughput.py --rungs`` runs a suite's slice at, and what it reports across them.

A rung is a model shape laid over the suite's base config (cpu-base.yaml for the CPU suites):

* ``cpu-base``: the config as it is (d64, batch 32 x 64);
* every scale of experiments/suites/ladder.yaml by name (``d64`` ... ``d256``: width, heads, init and batch as the
  ladder writes them; the benchmark's ``--steps`` replaces the rung's own max_steps);
* ``d512``: the ladder's d256 rung at twice the width (16 heads of 32, init 1/sqrt(512), batch 64), the width
  where bf16 pays most on the CPU (docs/performance.md, "bf16 on the CPU's matrix units").

Across rungs it puts each path's fits per hour, training share and step time side by side, with the fast path's
step speed-up over today's fp32 step (from each path's second fit on: the first pays a cold compile) against
the bf16/fp32 ratio of a 512 x 512 matmul measured in the same run (issue 58's goal: >= 85 % at d512).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import torch

from andrea_lab.experiments.sweep.suite import load_suite
from benchmarks.cpu_precision import square_matmul

LADDER = Path(__file__).resolve().parent.parent / "experiments" / "suites" / "ladder.yaml"
D512 = {"model.config.d_model": 512, "model.config.n_head": 16, "model.config.init_std": 0.0442, "data.batch_size": 64}
#: The path the others are measured against, and the sweep's default since issue 58.
TODAY, NEW = "today", "fastest"


def rung_overrides(name: str) -> dict[str, Any]:
    """The overrides that make ``name``'s shape (the module docstring); SystemExit naming the rungs if unknown."""
    if name == "cpu-base":
        return {}
    if name == "d512":
        return dict(D512)
    scales = {scale.name: scale.overrides for scale in load_suite(LADDER).scales}
    if name not in scales:
        raise SystemExit(f"--rungs: {name!r} is not a rung; rungs: cpu-base, {', '.join(scales)}, d512")
    return {key: value for key, value in scales[name].items() if key != "trainer.max_steps"}


def matmul_ratio(width: int = 512, reps: int = 5, rounds: int = 5, threads: Optional[int] = None) -> float:
    """bf16 over fp32 GFLOP/s of a ``width`` x ``width`` matmul, measured now in this process with ``threads``
    threads (the fits' OMP_NUM_THREADS; default torch's): the median of ``rounds`` ratios, each of an fp32 and a
    bf16 measurement taken one after the other (a burst of load from other processes then moves one ratio, not
    the result)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        ratios = [
            square_matmul(width, torch.bfloat16, reps) / square_matmul(width, torch.float32, reps)
            for _ in range(rounds)
        ]
    finally:
        torch.set_num_threads(before)
    return statistics.median(ratios)


def add_step_times(totals: pd.DataFrame, runs: pd.DataFrame) -> None:
    """``step_s``: each path's seconds per optimizer step over all its fits; ``step_s_from_2nd``: without its first
    fit (which pays a cold compile where the path compiles); NaN where the path ran one fit."""
    counts = runs.groupby("path", sort=False)["step_count"].sum()
    totals["step_s"] = totals["steps"] / counts.reindex(totals.index)
    later = runs[runs.groupby("path", sort=False).cumcount() > 0]
    per_step = later.groupby("path", sort=False)["steps"].sum() / later.groupby("path", sort=False)["step_count"].sum()
    totals["step_s_from_2nd"] = per_step.reindex(totals.index)


def side_by_side(by_rung: dict[str, pd.DataFrame], matmul: float) -> pd.DataFrame:
    """One row per rung and path: fits per hour (and against today's), the training and held-out shares, the step
    time, and the step's speed-up over today's, both from the second fit on (over every fit where a path ran
    one), as a share of the matmul ratio."""
    rows = []
    for rung, totals in by_rung.items():
        later = totals["step_s_from_2nd"].fillna(totals["step_s"])
        today = totals.loc[TODAY] if TODAY in totals.index else None
        for path, row in totals.iterrows():
            speedup = None if today is None else later[TODAY] / later[path]
            rows.append(
                {
                    "rung": rung,
                    "path": path,
                    "runs_per_hour": row["runs_per_hour"],
                    "vs_today": None if today is None else row["runs_per_hour"] / today["runs_per_hour"],
                    "steps_share": row["steps_share"],
                    "heldout_share": row["heldout_share"],
                    "step_s": row["step_s"],
                    "step_speedup_from_2nd": speedup,
                    "of_matmul_ratio": None if speedup is None else speedup / matmul,
                }
            )
    return pd.DataFrame(rows).set_index(["rung", "path"]).astype(float)
