"""What each rung of a ladder suite costs: the time of a training step of its reference variant, and the rung's
runs at that rate (issue 54: a ladder must be sized to its CPU budget before any run).

    python benchmarks/ladder_step_time.py experiments/suites/ladder.yaml            # 20 timed steps a rung
    python benchmarks/ladder_step_time.py experiments/suites/ladder.yaml --steps 10 --threads 1

Each rung's model is built exactly as the rung's command configures it (the suite planned, the reference
variant's first run at the rung parsed as the preflight parses it: sweep.ladder_compute), trained with AdamW
on random tokens of the rung's batch for ``--warmup`` discarded steps and ``--steps`` timed ones (forward,
backward, step, zero_grad), one thread by default: at ``andrea sweep -j 2`` on 2 cores each run has one.
Per rung it prints the median step, the runs the suite plans there, and their cost at that rate
(runs x max_steps x step), in run-hours and in wall hours at -j 2. Not counted: each run's start-up, its
validations and held-out evaluation (a few seconds a run at cpu-base), other variants' different step times
(SwiGLU, Muon, 9 blocks), so the total is a lower bound; on a shared machine other jobs only add time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import torch

from andrea_lab.experiments.sweep import ladder_compute, preflight
from andrea_lab.experiments.sweep.plan import plan_sweep
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.model.transformer import Andrea


def step_seconds(spec, warmup: int, steps: int) -> float:
    """Median seconds of one training step of the model ``spec``'s command trains, at its batch size."""
    config = preflight.parsed_config(spec.fit_args)
    model_config = preflight.model_config_from(config)
    batch = int(config.data.batch_size)
    model = Andrea(model_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, model_config.vocab_size, (batch, model_config.block_size + 1))
    times = []
    for index in range(warmup + steps):
        start = time.perf_counter()
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="the -j the wall hours are for")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    suite = load_suite(args.suite)
    specs = plan_sweep(suite, "runs")
    runs = Counter(spec.scale for spec in specs)
    first = {}
    for spec in specs:
        if spec.variant == suite.reference:
            first.setdefault(spec.scale, spec)
    total = 0.0
    print(f"| rung | 6·N·D | step (s, {args.threads} thread) | runs | run-hours | wall h at -j {args.jobs} |")
    print("|---|---|---|---|---|---|")
    for scale in suite.scales:
        spec = first[scale.name]
        rung = ladder_compute.rung_compute(spec)
        steps = int(preflight.parsed_config(spec.fit_args).trainer.max_steps)
        seconds = step_seconds(spec, args.warmup, args.steps)
        hours = runs[scale.name] * steps * seconds / 3600
        total += hours
        print(
            f"| {scale.name} | {rung.flops:.3g} | {seconds:.4f} | {runs[scale.name]} | {hours:.2f} "
            f"| {hours / args.jobs:.2f} |"
        )
    print(f"| all | | | {len(specs)} | {total:.2f} | {total / args.jobs:.2f} |")


if __name__ == "__main__":
    main()
