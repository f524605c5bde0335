"""Why ``andrea sweep --speed`` trains bf16-mixed with the attention in float32 on the CPU, measured in one run.

    python benchmarks/cpu_attention.py                  # d256 and d512 at the ladder's shape, 1 thread
    python benchmarks/cpu_attention.py --steps 5 --widths 512

PyTorch's CPU flash-attention kernel runs its bf16 backward several times slower than its float32 one, so under
bf16 autocast the attention, a few percent of an fp32 step, became a fifth of a bf16 one (torch.profiler on a
d512 step, 2026-12-06). For each width this prints, side by side: the attention's forward + backward alone in
float32 and in bf16, and a whole training step (forward, backward, AdamW) in fp32, in bf16-mixed, and in
bf16-mixed with ``cpu_attention_fp32`` (AndreaConfig), each step's speed-up over fp32 and that speed-up as a share
of a 512 x 512 matmul's bf16/fp32 ratio measured at the start and the end of the same run (issue 58's goal:
>= 0.85 at d512). Random tokens; the model is the ladder's rung (6 blocks, heads of 32, block 64, batch 64).
``--profile 512`` instead prints where one step's time goes in each arm (torch.profiler).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: benchmarks/ is not on the path
    sys.path.insert(0, str(REPO))

from andrea_lab.model.config import AndreaConfig  # noqa: E402
from andrea_lab.model.transformer import Andrea  # noqa: E402
from benchmarks.cpu_precision import median_seconds  # noqa: E402
from benchmarks.sweep_rungs import matmul_ratio  # noqa: E402

#: Each training step's arithmetic: fp32, bf16-mixed, and bf16-mixed with AndreaConfig.cpu_attention_fp32.
ARMS = ("fp32", "bf16", "bf16+fp32-attention")


def attention_seconds(width: int, batch: int, dtype: torch.dtype, reps: int) -> float:
    """Median seconds of one causal attention forward + backward at the rung's shape, in ``dtype``."""
    q, k, v = (torch.randn(batch, width // 32, 64, 32, dtype=dtype, requires_grad=True) for _ in range(3))

    def work():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    return median_seconds(work, reps)


def training_step(width: int, batch: int, arm: str) -> Callable[[], None]:
    """One training step of the rung's model in ``arm`` (fp32, bf16, bf16+fp32-attention), ready to call."""
    torch.manual_seed(0)
    config = AndreaConfig(
        vocab_size=257, block_size=64, d_model=width, n_layer=6, n_head=width // 32, init_std=width**-0.5,
        cpu_attention_fp32=arm == "bf16+fp32-attention",
    )  # fmt: skip
    model = Andrea(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 257, (batch, 65))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if arm != "fp32" else nullcontext()

    def work():
        with autocast:
            _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return work


def step_seconds(width: int, batch: int, arm: str, steps: int) -> float:
    """Median seconds of one training step of the rung's model in ``arm``."""
    return median_seconds(training_step(width, batch, arm), steps)


def profile_steps(width: int, batch: int, arm: str, steps: int = 3, top: int = 6) -> None:
    """Print the ops that took the most of ``steps`` training steps (torch.profiler, self CPU time per step)."""
    from torch.profiler import ProfilerActivity, profile  # only with --profile: the profiler is heavy to import

    work = training_step(width, batch, arm)
    for _ in range(2):  # warm-up, as the timings
        work()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            work()
    events = sorted(prof.key_averages(), key=lambda event: -event.self_cpu_time_total)
    total = sum(event.self_cpu_time_total for event in events) / 1e6 / steps
    print(f"d{width} {arm}: {total:.3f} s a step under the profiler; the {top} costliest ops (self CPU, a step):")
    for event in events[:top]:
        seconds = event.self_cpu_time_total / 1e6 / steps
        print(f"  {event.key[:58]:58s} {seconds:7.3f} s {seconds / total:6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="256,512")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per arm (after 2 discarded)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", type=int, metavar="WIDTH", help="instead: where a step's time goes, per arm")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.profile:
        for arm in ARMS:
            profile_steps(args.profile, args.batch, arm)
        return
    ratios = [matmul_ratio(threads=args.threads)]
    rows = []
    for width in (int(w) for w in args.widths.split(",")):
        fp32_att = attention_seconds(width, args.batch, torch.float32, 10)
        bf16_att = attention_seconds(width, args.batch, torch.bfloat16, 10)
        print(f"d{width}: attention fwd+bwd fp32 {fp32_att * 1e3:.1f} ms, bf16 {bf16_att * 1e3:.1f} ms", flush=True)
        steps = {arm: step_seconds(width, args.batch, arm, args.steps) for arm in ARMS}
        rows.append((width, steps))
    ratios.append(matmul_ratio(threads=args.threads))
    matmul = statistics.mean(ratios)
    print(
        f"\nbf16/fp32 matmul 512^3 in this run: {ratios[0]:.2f}x at start, {ratios[1]:.2f}x at end; "
        f"{args.threads} thread(s)"
    )
    print(f"{'rung':>6} {'arm':>22} {'step s':>8} {'vs fp32':>8} {'of matmul ratio':>16}")
    for width, steps in rows:
        for arm, seconds in steps.items():
            speedup = steps["fp32"] / seconds
            print(f"{'d' + str(width):>6} {arm:>22} {seconds:8.3f} {speedup:7.2f}x {speedup / matmul:16.2f}")


if __name__ == "__main__":
    main()
