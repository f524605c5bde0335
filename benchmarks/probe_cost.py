"""What each part of the stability probe costs, against a training step, in one run.

    python benchmarks/probe_cost.py                           # the instability suite's shapes: d64 and d128
    python benchmarks/probe_cost.py --widths 64,256 --interval 10 --json probe_cost.json

Why: the instability suite probes every 10 steps (experiments/suites/instability.yaml) and the precursor
record (docs/stability.md, "What gave way first") adds per-matrix snapshots, Adam's second moments and power
iterations; a probe that costs more than it tells should be sampled or off by default.

One model per width (4 blocks, head size 32, byte vocabulary, ``--batch`` x ``--block`` tokens, AdamW) trains
on one batch of random tokens. After ``--warmup`` steps, each round times, in an order rotated every round
(drift on a shared machine hits all alike):

* ``train_step``: forward, backward, AdamW step (what every step costs);
* ``probe``: :func:`andrea_lab.fit.stability.probe.measure_probe` (a forward and a gradient on the probe batch,
  every metric of the probe and of the precursors that read a probe pass);
* ``optimizer_share``: Adam's second moments against ε (:func:`...precursors.measure_optimizer`);
* ``matrix_updates``: the per-matrix snapshot and update ratios (:func:`...precursors.snapshot_matrices`,
  :func:`...precursors.measure_matrix_updates`), without and with singular values (``spectral``).

It prints, per part, the median ms, its ratio to the training step (the median of per-round ratios, so drift
between rounds cancels) and what it adds to a step on average at ``--interval`` (spectral: every
``--spectral-every``-th probe). Every figure is measured in this one run: never compare milliseconds across
runs or machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: benchmarks/ is not on the path
    sys.path.insert(0, str(REPO))

from andrea_lab.fit.stability import precursors  # noqa: E402
from andrea_lab.fit.stability.probe import measure_probe  # noqa: E402
from andrea_lab.model.config import AndreaConfig  # noqa: E402
from andrea_lab.model.transformer import Andrea  # noqa: E402
from andrea_lab.runs.machine import cpu_description  # noqa: E402

PARTS = ("train_step", "probe", "optimizer_share", "matrix_updates", "matrix_updates_spectral")


def parts_at(width: int, args: argparse.Namespace) -> dict[str, Callable[[], None]]:
    """The timed callables of one width, sharing one model, optimizer and batch."""
    torch.manual_seed(0)
    config = AndreaConfig(
        vocab_size=257, block_size=args.block, d_model=width, n_layer=args.layers, n_head=max(1, width // 32)
    )
    model = Andrea(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 257, (args.batch, args.block))
    probe_x = x[: args.probe_sequences]

    def train_step() -> None:
        _, loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def matrix_updates(spectral: bool) -> Callable[[], None]:
        def run() -> None:
            before = precursors.snapshot_matrices(model)
            precursors.measure_matrix_updates(model, before, spectral)

        return run

    return {
        "train_step": train_step,
        "probe": lambda: measure_probe(model, probe_x),
        "optimizer_share": lambda: precursors.measure_optimizer(model, [optimizer]),
        "matrix_updates": matrix_updates(False),
        "matrix_updates_spectral": matrix_updates(True),
    }


def measure_width(width: int, args: argparse.Namespace) -> list[dict[str, object]]:
    parts = parts_at(width, args)
    for _ in range(args.warmup):
        for run in parts.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in parts}
    names = list(parts)
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            parts[name]()
            times[name].append(time.perf_counter() - started)
    rows = []
    for name in names:
        ratios = [t / step for t, step in zip(times[name], times["train_step"])]
        ratio = statistics.median(ratios)
        every = 1 if name == "train_step" else args.interval * (args.spectral_every if "spectral" in name else 1)
        rows.append(
            {
                "d_model": width,
                "part": name,
                "ms": 1e3 * statistics.median(times[name]),
                "ratio_to_step": ratio,
                "every_steps": every,
                "added_per_step": 0.0 if name == "train_step" else ratio / every,
            }
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="64,128", help="comma-separated d_model values (head size 32)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--probe-sequences", type=int, default=8, help="the monitor's default probe batch")
    parser.add_argument("--interval", type=int, default=10, help="probe every this many steps (the suite's)")
    parser.add_argument("--spectral-every", type=int, default=4, help="singular values every this many probes")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        args.width_list = [int(w) for w in args.widths.split(",")]
    except ValueError:
        parser.error(f"--widths must be comma-separated integers, got {args.widths!r}")
    if any(w < 1 for w in args.width_list) or min(args.interval, args.spectral_every, args.rounds) < 1:
        parser.error("--widths, --interval, --spectral-every and --rounds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"probe cost against a training step; {cpu_description()}; torch threads {torch.get_num_threads()}")
    print(f"probe every {args.interval} steps, singular values every {args.spectral_every}th probe")
    print(f"{'d_model':>7}  {'part':<24} {'ms':>8}  {'x step':>7}  {'every':>5}  {'adds to a step':>14}")
    rows = []
    for width in args.width_list:
        for row in measure_width(width, args):
            rows.append(row)
            print(
                f"{row['d_model']:>7}  {row['part']:<24} {row['ms']:>8.2f}  {row['ratio_to_step']:>7.2f}  "
                f"{row['every_steps']:>5}  {row['added_per_step']:>13.1%}"
            )
        total = sum(r["added_per_step"] for r in rows if r["d_model"] == width and r["part"] != "matrix_updates")
        print(f"{width:>7}  {'all probes on':<24} {'':>8}  {'':>7}  {'':>5}  {total:>13.1%}")
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "cpu": cpu_description()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
