"""fp32 against bf16 on the CPU, in one run: the matmuls alone, then ANDREA's own training step, by width.

    python benchmarks/cpu_precision.py                         # d64 .. d768, 4 blocks, batch 16 x 128
    python benchmarks/cpu_precision.py --widths 128,512 --steps 5 --json cpu_precision.json
    python benchmarks/cpu_precision.py --widths 512 --settings bf16-mixed+math-attention,bf16-mixed+compile

Why: the CPU suites are small because the CPU is slow, and part of this project's machines are Xeons whose
AMX units (``amx_bf16``) multiply bf16 matrices 2-3.5x faster than fp32 at 256-1024 wide, and slower at
128. Whether a fit gains depends on how much of its step is matmuls and what the rest costs in bf16.

What it prints, every figure measured in this one run (never compare speeds across runs or machines):

* the CPU model and its bf16-relevant flags (``amx_bf16``, ``amx_tile``, ``avx512_bf16``, ``avx512f``), and
  a line saying so where it has no bf16 units (it still measures: bf16 then runs on emulation paths);
* per width, square matmuls of that width: GFLOP/s in fp32 and bf16 and their ratio;
* per width, the model's own matmul shapes (the tokens of a batch through its QKV, attention output and
  MLP layers, the head over the vocabulary) timed in fp32 and bf16: the speed-up the matrix units could give
  this step if nothing else existed;
* per width and precision setting, ms per training step (forward, backward, AdamW step) and its ratio to
  fp32: ``32-true``; ``bf16-mixed`` (what Lightning's ``precision: bf16-mixed`` does on the CPU: fp32
  weights, the forward under ``torch.autocast("cpu", torch.bfloat16)``); ``bf16-true`` (weights and
  activations in bf16, AdamW on bf16 parameters: faster, less exact); and, asked for with ``--settings``,
  what else PyTorch offers against the rest of the bf16 step: ``bf16-mixed+math-attention`` (SDPA's math
  path instead of the CPU flash kernel, whose backward was the largest non-matmul cost) and
  ``bf16-mixed+compile`` (``torch.compile`` of the model: fused elementwise work, norms and casts);
  ``bf16-mixed+fp32-attention`` (``AndreaConfig.cpu_attention_fp32``: the attention kernel in fp32 under
  autocast, the path ``andrea sweep --speed auto`` chooses) and ``bf16-mixed+fp32-attention+compile`` (that path
  compiled: what the sweep's compile rule weighs against a compile's cost);
* the share of a bf16-mixed step spent in matmul kernels (``torch.profiler``: self CPU time of ``aten::mm``,
  ``addmm``, ``bmm`` and the attention kernel, over all ops' self time), and at the widest width the ops that
  take most of it (``--top``), so what is left beside the matmuls shows;
* "of the possible": the bf16-mixed step's speed-up over the model-shape matmul speed-up (the issue's goal
  is >= 85 % at d512 on an AMX machine), and the same for the fastest bf16 setting measured.

Steps are timed alternately (fp32, bf16-mixed, bf16-true, fp32, ...) after warm-up so that drift on a
shared machine hits all settings alike; the median is reported.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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

from andrea_lab.model.config import AndreaConfig  # noqa: E402
from andrea_lab.model.transformer import Andrea  # noqa: E402
from andrea_lab.runs.machine import cpu_description, has_bf16_units  # noqa: E402

#: Every setting the benchmark knows; ``32-true`` (the reference) and ``bf16-mixed`` are always measured.
ALL_SETTINGS = (
    "32-true",
    "bf16-mixed",
    "bf16-true",
    "bf16-mixed+math-attention",
    "bf16-mixed+compile",
    "bf16-mixed+fp32-attention",
    "bf16-mixed+fp32-attention+compile",
)
SETTINGS = ("32-true", "bf16-mixed", "bf16-true")  # the default
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu")


def median_seconds(fn: Callable[[], object], reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def square_matmul(width: int, dtype: torch.dtype, reps: int) -> float:
    """GFLOP/s of a ``width`` x ``width`` matmul in ``dtype``."""
    a, b = torch.randn(width, width).to(dtype), torch.randn(width, width).to(dtype)
    inner = max(1, int(2e8 // (2 * width**3)))  # about 0.2 GFLOP per timed call, so small widths are timeable

    def run() -> None:
        for _ in range(inner):
            torch.mm(a, b)

    return 2 * width**3 * inner / median_seconds(run, reps) / 1e9


def model_shapes(config: AndreaConfig, tokens: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of the step's linear layers for ``tokens`` tokens: QKV, attention out, MLP in and out per
    block, and the head over the vocabulary (attention's own matmuls are left to the step)."""
    d, hidden = config.d_model, int(4 * config.d_model)
    per_block = [(tokens, d, 3 * d), (tokens, d, d), (tokens, d, hidden), (tokens, hidden, d)]
    return per_block * config.n_layer + [(tokens, d, config.vocab_size)]


def shapes_seconds(shapes: list[tuple[int, int, int]], dtype: torch.dtype, reps: int) -> float:
    """Seconds for forward + the two backward matmuls of every shape (3 matmuls each), in ``dtype``."""
    tensors = [
        (torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype), torch.randn(m, n).to(dtype)) for m, k, n in shapes
    ]

    def run() -> None:
        for x, w, g in tensors:
            torch.mm(x, w)
            torch.mm(g, w.t())
            torch.mm(x.t(), g)

    return median_seconds(run, reps, warmup=1)


def setting_model(config: AndreaConfig, setting: str, seed: int = 0) -> Andrea:
    """The model ``setting`` trains: bf16 weights for ``bf16-true``, the attention in fp32 for ``+fp32-attention``."""
    precision, *modifiers = setting.split("+")
    torch.manual_seed(seed)
    model = Andrea(dataclasses.replace(config, cpu_attention_fp32="fp32-attention" in modifiers))
    return model.to(torch.bfloat16) if precision == "bf16-true" else model


def training_step(config: AndreaConfig, setting: str, batch: int, seed: int = 0) -> Callable[[], None]:
    """One optimizer step of ``setting`` on random tokens; returns the step as a closure."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    precision, *modifiers = setting.split("+")
    model = setting_model(config, setting, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    forward = torch.compile(model) if "compile" in modifiers else model
    idx = torch.randint(0, config.vocab_size, (batch, config.block_size))
    targets = torch.randint(0, config.vocab_size, (batch, config.block_size))
    autocast = precision == "bf16-mixed"
    math_attention = "math-attention" in modifiers

    def step() -> None:
        # The backward runs inside too: it is the flash kernel's costly half.
        with sdpa_kernel(SDPBackend.MATH) if math_attention else contextlib.nullcontext():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                _, loss = forward(idx, targets)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def profile_step(step: Callable[[], None]) -> list[tuple[str, float]]:
    """Each op's share of one step's self CPU time (torch.profiler), largest first."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = prof.key_averages()
    total = sum(event.self_cpu_time_total for event in events) or float("nan")
    shares = [(event.key, event.self_cpu_time_total / total) for event in events]
    return sorted(shares, key=lambda share: -share[1])


def matmul_share(shares: list[tuple[str, float]]) -> float:
    """Share of the step in matmul kernels (:data:`MATMUL_OPS`)."""
    return sum(share for key, share in shares if key in MATMUL_OPS)


def measure_width(width: int, args: argparse.Namespace) -> dict[str, object]:
    config = AndreaConfig(
        vocab_size=args.vocab, block_size=args.block, d_model=width, n_layer=args.layers, n_head=max(1, width // 64)
    )
    row: dict[str, object] = {"d_model": width}
    fp32_mm, bf16_mm = (square_matmul(width, dtype, args.reps) for dtype in (torch.float32, torch.bfloat16))
    row.update(square_fp32_gflops=fp32_mm, square_bf16_gflops=bf16_mm, square_ratio=bf16_mm / fp32_mm)
    shapes = model_shapes(config, args.batch * args.block)
    fp32_shapes, bf16_shapes = (shapes_seconds(shapes, dtype, args.reps) for dtype in (torch.float32, torch.bfloat16))
    row["model_matmul_ratio"] = fp32_shapes / bf16_shapes
    steps = {setting: training_step(config, setting, args.batch) for setting in args.settings}
    for step in steps.values():  # warm-up: first-call allocation, oneDNN kernel selection, compilation
        step()
        step()
    times: dict[str, list[float]] = {setting: [] for setting in args.settings}
    for _ in range(args.steps):  # alternate, so drift on a shared machine hits every setting alike
        for setting, step in steps.items():
            start = time.perf_counter()
            step()
            times[setting].append(time.perf_counter() - start)
    for setting in args.settings:
        row[f"ms_{setting}"] = 1e3 * statistics.median(times[setting])
        row[f"ratio_{setting}"] = row["ms_32-true"] / row[f"ms_{setting}"]
    shares = profile_step(steps["bf16-mixed"])
    row["matmul_share_bf16_mixed"] = matmul_share(shares)
    row["top_ops_bf16_mixed"] = shares[: args.top]
    row["of_possible_bf16_mixed"] = row["ratio_bf16-mixed"] / row["model_matmul_ratio"]
    fastest = max((s for s in args.settings if s != "32-true"), key=lambda s: row[f"ratio_{s}"])
    row["fastest_bf16"] = fastest
    row["of_possible_fastest"] = row[f"ratio_{fastest}"] / row["model_matmul_ratio"]
    return row


def columns(settings: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """The table's columns for the settings measured: ms/step and speed-up of each beside fp32's."""
    found = [
        ("d_model", "d", "{:d}"),
        ("square_ratio", "mm bf16/fp32", "{:.2f}x"),
        ("model_matmul_ratio", "model mm bf16/fp32", "{:.2f}x"),
        ("ms_32-true", "fp32 ms/step", "{:.1f}"),
    ]
    for setting in settings:
        if setting != "32-true":
            found += [(f"ms_{setting}", f"{setting} ms/step", "{:.1f}"), (f"ratio_{setting}", "speed-up", "{:.2f}x")]
    return found + [
        ("matmul_share_bf16_mixed", "bf16-mixed step in matmuls", "{:.0%}"),
        ("of_possible_bf16_mixed", "of the possible", "{:.0%}"),
        ("fastest_bf16", "fastest bf16", "{}"),
        ("of_possible_fastest", "its share of the possible", "{:.0%}"),
    ]


def table(rows: list[dict[str, object]], settings: tuple[str, ...] = SETTINGS) -> str:
    chosen = columns(settings)
    lines = ["| " + " | ".join(label for _, label, _ in chosen) + " |", "|" + "---|" * len(chosen)]
    for row in rows:
        lines.append("| " + " | ".join(fmt.format(row[key]) for key, _, fmt in chosen) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="64,128,256,512,768", help="d_model values, comma-separated")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=8449)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per setting and width")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions of each matmul measurement")
    parser.add_argument("--top", type=int, default=8, help="ops of the widest bf16-mixed step to list by share")
    parser.add_argument("--json", help="also write every measurement here")
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help=f"settings to time, comma-separated, from {', '.join(ALL_SETTINGS)} (32-true and bf16-mixed always)",
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.settings.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in ALL_SETTINGS]
    if unknown:
        parser.error(f"--settings: unknown {', '.join(map(repr, unknown))}; valid: {', '.join(ALL_SETTINGS)}")
    args.settings = tuple(dict.fromkeys(["32-true", "bf16-mixed", *chosen]))
    try:
        args.widths = [int(w) for w in args.widths.split(",")]
    except ValueError:
        parser.error(f"--widths must be comma-separated integers, got {args.widths!r}")
    for name in ("layers", "batch", "block", "vocab", "steps", "reps", "top"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if any(w < 1 or w % max(1, w // 64) for w in args.widths):
        parser.error(f"every width must be positive (and divisible by its head count, width // 64): {args.widths}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine = cpu_description()
    print(f"CPU: {machine['cpu']}; bf16-relevant flags: {', '.join(machine['bf16_flags']) or 'none'}")
    if not has_bf16_units(machine["bf16_flags"]):
        print("this CPU has no bf16 units (neither amx_bf16 nor avx512_bf16): bf16 is emulated, expect it slower")
    shape = f"{args.layers} blocks, batch {args.batch} x {args.block}"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {shape}")
    rows = []
    for width in args.widths:
        rows.append(measure_width(width, args))
        print(f"  d{width} measured", file=sys.stderr, flush=True)
    print(table(rows, args.settings))
    widest = rows[-1]
    print(f"\nwhere the bf16-mixed step goes at d{widest['d_model']} (self CPU time, torch.profiler):")
    for key, share in widest["top_ops_bf16_mixed"]:
        print(f"  {share:6.1%}  {key}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "torch": torch.__version__, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
