"""What each optimizer plugin costs relative to AdamW, in one run: its step, a whole training step, its state.

    python benchmarks/optimizer_cost.py                          # cpu-base (experiments/cpu-base.yaml)
    python benchmarks/optimizer_cost.py --widths 64,256 --json optimizer_cost.json

Why: the optimizer suites compare AdamW, Muon, Lion and schedule-free AdamW at equal steps; what a step of
each costs says what "equal steps" means in time, and whether the optimizer is a visible part of a step at
the CPU suites' size at all.

Every registered optimizer (or those of ``--optimizers``) is built exactly as ``andrea fit`` builds it
(:class:`andrea_lab.fit.optim.OptimizerChoice`, fused where torch has the kernel, its default schedule) over
its own copy of one model, initialised alike: the model of ``--config`` (its ``model.config``, its learning
rate and weight decay; its ``data.batch_size``), or that model made wider (``--widths``, the same head size).
All train on the same batch of random tokens. After ``--warmup`` discarded steps each, the optimizers take
``--rounds`` rounds of one training step each (forward, backward, optimizer step, zero_grad, schedule
step), the order rotated every round, so that drift on a shared machine hits all of them alike. Per
optimizer it prints:

* the median optimizer step (``optimizer.step()`` alone, timed inside the training step and then
  ``--step-repeats - 1`` times more on the same gradients, the fastest of them counting for the round: on a
  shared machine other jobs only ever add time, and one step is a few ms) and the median training step
  (the repeats left out), in ms, each with its ratio to AdamW: the median of the per-round ratios (each
  against AdamW's step in the same round, so drift between rounds cancels) and their spread (25th-75th
  percentile);
* the optimizer's state: the bytes of every tensor in ``optimizer.state`` after the warm-up, and that over
  the bytes of the weights.

On a machine busier than its cores, ``--threads 1``: two threads that wait on each other at every op make
every step several times slower and far noisier (measured: docs/performance.md, "Optimizer cost").

An optimizer that cannot be built (its package is not installed) is listed as skipped, with the reason.
Every figure is measured in this one run: never compare milliseconds across runs or machines.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: benchmarks/ is not on the path
    sys.path.insert(0, str(REPO))

from andrea_lab.errors import UsageError  # noqa: E402
from andrea_lab.fit.optim import OptimizerChoice, tag_weight_decay  # noqa: E402
from andrea_lab.model.config import AndreaConfig  # noqa: E402
from andrea_lab.model.registry import registered_names  # noqa: E402
from andrea_lab.model.transformer import Andrea  # noqa: E402
from andrea_lab.runs.machine import cpu_description  # noqa: E402

BASELINE = "adamw"
CPU_BASE = REPO / "experiments" / "cpu-base.yaml"
#: Neither changes what a step costs; AndreaLM's defaults, for a YAML that leaves them unset (cpu-base does).
DEFAULT_BETAS, DEFAULT_EPS = (0.9, 0.95), 1e-8


@dataclasses.dataclass(frozen=True)
class Base:
    """The model, training hyperparameters and batch size read from an experiment YAML."""

    config: AndreaConfig
    hparams: dict
    batch: int

    @classmethod
    def read(cls, path: Path) -> "Base":
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        return cls(AndreaConfig(**spec["model"]["config"]), spec["model"], int(spec["data"]["batch_size"]))

    def at_width(self, width: int, layers: int | None = None) -> AndreaConfig:
        """The model ``width`` wide with the YAML's head size (one head where ``width`` is narrower), and
        ``layers`` blocks (the YAML's by default)."""
        head = self.config.d_model // self.config.n_head
        n_layer = layers or self.config.n_layer
        return dataclasses.replace(self.config, d_model=width, n_head=max(1, width // head), n_layer=n_layer)

    def choice(self, optimizer: str) -> OptimizerChoice:
        h = self.hparams
        betas, eps = tuple(h.get("betas", DEFAULT_BETAS)), float(h.get("eps", DEFAULT_EPS))
        return OptimizerChoice(
            optimizer, None, {}, {}, h["lr"], betas, eps, h["weight_decay"], h["warmup_steps"], h["min_lr_ratio"]
        )


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor the optimizer keeps per parameter. A combined optimizer (muon) is read part by
    part: its ``state`` is a ChainMap over the parts' defaultdicts, where reading a parameter of a later part
    returns (and inserts into the first part) an empty dict, so its AdamW part would count nothing."""
    parts = getattr(optimizer, "parts", {"": optimizer}).values()
    return sum(
        value.numel() * value.element_size()
        for part in parts
        for state in part.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )


def trainee(base: Base, config: AndreaConfig, name: str, batch: tuple[torch.Tensor, torch.Tensor], args):
    """A model of its own (seeded alike) with optimizer ``name`` as ``andrea fit`` builds it; returns the
    training step (returning seconds of the optimizer step and of the whole step, and the loss), the
    optimizer and the bytes of the weights. Raises UsageError where the optimizer cannot be built (a package
    not installed)."""
    torch.manual_seed(0)
    model = Andrea(config)
    tag_weight_decay(model)  # roles and decay flags, as AndreaLM records them: Muon's groups depend on them
    optimizer, scheduler, _ = base.choice(name).build(model, decay_steps=args.warmup + args.rounds, fused=True)
    idx, targets = batch

    def optimizer_step() -> float:
        start = time.perf_counter()
        optimizer.step()
        return time.perf_counter() - start

    def step() -> tuple[float, float, float]:
        start = time.perf_counter()
        _, loss = model(idx, targets)
        loss.backward()
        stepped = optimizer_step()
        backward_and_step = time.perf_counter() - start
        # The step again on the same gradients; the fastest counts (other jobs only ever add time).
        fastest = min([stepped] + [optimizer_step() for _ in range(args.step_repeats - 1)])
        finishing = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        return fastest, backward_and_step + time.perf_counter() - finishing, loss.item()

    return step, optimizer, sum(p.numel() * p.element_size() for p in model.parameters())


def rounds(steps: dict[str, Callable], count: int) -> dict[str, dict[str, list[float]]]:
    """``count`` rounds of one step per optimizer, the order rotated each round; seconds per round."""
    names = list(steps)
    times = {name: {"step": [], "train": [], "loss": []} for name in names}
    for r in range(count):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            for key, value in zip(("step", "train", "loss"), steps[name]()):
                times[name][key].append(value)
    return times


def ratio_summary(times: list[float], baseline: list[float]) -> dict[str, float]:
    """Median ms; the median and 25th/75th percentiles of the per-round ratios to the baseline (paired by
    round: drift between rounds cancels, which a ratio of the two medians would not see)."""
    per_round = [t / b for t, b in zip(times, baseline)]
    low, mid, high = statistics.quantiles(per_round, n=4, method="inclusive") if len(per_round) > 1 else per_round * 3
    return {"ms": 1e3 * statistics.median(times), "ratio": mid, "ratio_p25": low, "ratio_p75": high}


def measure_width(base: Base, width: int, args: argparse.Namespace) -> list[dict[str, object]]:
    """One row per optimizer at ``width``: the timings against AdamW's and the state, or why it was skipped."""
    config = base.at_width(width, args.layers)
    torch.manual_seed(1)
    batch = tuple(torch.randint(0, config.vocab_size, (args.batch, config.block_size)) for _ in range(2))
    steps, built, skipped = {}, {}, {}
    for name in args.optimizers:
        try:
            steps[name], optimizer, weight_bytes = trainee(base, config, name, batch, args)
            built[name] = (optimizer, weight_bytes)
        except UsageError as exc:
            skipped[name] = str(exc)
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    times = rounds(steps, args.rounds)
    rows: list[dict[str, object]] = []
    for name in args.optimizers:
        row: dict[str, object] = {"d_model": width, "optimizer": name}
        if name in skipped:
            rows.append({**row, "skipped": skipped[name]})
            continue
        for kind in ("step", "train"):
            summary = ratio_summary(times[name][kind], times[BASELINE][kind])
            row.update({f"{kind}_{key}": value for key, value in summary.items()})
        optimizer, weight_bytes = built[name]
        row.update(state_bytes=state_bytes(optimizer), weight_bytes=weight_bytes, final_loss=times[name]["loss"][-1])
        row["state_over_weights"] = row["state_bytes"] / weight_bytes
        rows.append(row)
    return rows


#: How each printed column shows; the table is the frame of the measured rows, these columns in this order.
SHOWN = {
    "d_model": "{:d}".format,
    "optimizer": str,
    "step_ms": "{:.2f}".format,
    "step_ratio": "{:.2f}x".format,
    "step_spread": str,
    "train_ms": "{:.1f}".format,
    "train_ratio": "{:.2f}x".format,
    "train_spread": str,
    "state_MiB": "{:.2f}".format,
    "state_over_weights": "{:.2f}x".format,
}


def table(rows: list[dict[str, object]]) -> str:
    frame = pd.DataFrame([row for row in rows if "skipped" not in row])
    for kind in ("step", "train"):
        frame[f"{kind}_spread"] = [
            f"{a:.2f}-{b:.2f}" for a, b in zip(frame[f"{kind}_ratio_p25"], frame[f"{kind}_ratio_p75"])
        ]
    frame["state_MiB"] = frame["state_bytes"] / 2**20
    return frame[list(SHOWN)].to_string(index=False, formatters=SHOWN)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(CPU_BASE), help="experiment YAML whose model is measured")
    parser.add_argument("--widths", help="d_model values, comma-separated (default: the YAML's)")
    parser.add_argument("--optimizers", help=f"comma-separated (default: every registered one); {BASELINE} always")
    parser.add_argument("--layers", type=int, help="blocks (default: the YAML's model.config.n_layer)")
    parser.add_argument("--batch", type=int, help="sequences per batch (default: the YAML's data.batch_size)")
    parser.add_argument("--warmup", type=int, default=5, help="discarded steps per optimizer and width")
    parser.add_argument("--rounds", type=int, default=40, help="timed steps per optimizer and width")
    parser.add_argument(
        "--step-repeats",
        type=int,
        default=3,
        help="optimizer steps per round on the same gradients; the fastest counts",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads (default: torch's); 1 on a busy machine, where 2 threads wait on each other",
    )
    parser.add_argument("--json", help="also write every measurement here")
    args = parser.parse_args(argv)
    registered = registered_names("optimizer")
    names = args.optimizers.split(",") if args.optimizers else registered
    if unknown := [n for n in names if n not in registered]:
        parser.error(f"--optimizers: {', '.join(unknown)} not registered; registered: {', '.join(registered)}")
    args.optimizers = [BASELINE] + [n for n in names if n != BASELINE]
    try:
        args.widths = [int(w) for w in args.widths.split(",")] if args.widths else None
    except ValueError:
        parser.error(f"--widths must be comma-separated integers, got {args.widths!r}")
    if args.widths and min(args.widths) < 1:
        parser.error(f"--widths must be positive, got {args.widths}")
    for name in ("layers", "batch", "warmup", "rounds", "step_repeats", "threads"):
        least = 0 if name == "warmup" else 1
        if getattr(args, name) is not None and getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be an integer >= {least}, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = Base.read(Path(args.config))
    args.widths = args.widths or [base.config.d_model]
    args.batch = args.batch or base.batch
    if args.threads:
        torch.set_num_threads(args.threads)
    config = base.at_width(base.config.d_model, args.layers)
    print(f"CPU: {cpu_description()['cpu']}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"{Path(args.config).name}: {config.n_layer} blocks, head size {config.d_model // config.n_head}, "
        f"batch {args.batch} x {config.block_size}; {args.rounds} rounds after {args.warmup} warm-up steps, "
        f"optimizer step: fastest of {args.step_repeats} a round"
    )
    rows = []
    for width in args.widths:
        rows += measure_width(base, width, args)
        print(f"  d{width} measured", file=sys.stderr, flush=True)
    print(table(rows))
    for row in rows:
        if "skipped" in row:
            print(f"skipped {row['optimizer']} at d{row['d_model']}: {row['skipped']}")
        elif not math.isfinite(row["final_loss"]):
            print(f"note: {row['optimizer']} at d{row['d_model']} ended at loss {row['final_loss']} (timed anyway)")
    if args.json:
        machine = {"cpu": cpu_description()["cpu"], "torch": torch.__version__, "threads": torch.get_num_threads()}
        setup = {
            key: getattr(args, key)
            for key in ("config", "layers", "batch", "warmup", "rounds", "step_repeats", "threads")
        }
        Path(args.json).write_text(json.dumps({"machine": machine, "setup": setup, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
