"""How the held-out evaluation's batch size moves its time on this machine, beside the batch fit.eval_batch derives.

    python benchmarks/heldout_batch.py                                   # d64 and d256, batches 8..1024
    python benchmarks/heldout_batch.py --widths 512 --batches 4,8,16,64 --windows 256

Per width (cpu-base's shape otherwise: vocab 257, 64 tokens, 6 blocks, heads of 16 at d64 and 32 above; the
precision as ``--speed auto`` picks it on a CPU with bf16 units: bf16 autocast with the attention in fp32 from
speed_path.BF16_FROM_WIDTH (d64; d256 before 2026-12-06), fp32 below), it scores ``--windows`` random
windows forward with the loss, as heldout.py does (inference mode, float32 cross-entropy), at each batch size,
the sizes interleaved within each of ``--rounds`` passes so that a burst of load hits them alike, and prints the
best pass per size (wall and this process's CPU seconds) and the batch fit.eval_batch derives for this
machine's bound. Then the set-up an evaluation
makes before its first forward (the planned windows, the bytes per token, the documents' names), on the stdlib
corpus at cpu-base's budget, twice.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from andrea_lab.experiments.sweep import speed_path
from andrea_lab.fit import eval_batch
from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.transformer import Andrea


def score_seconds(model: Andrea, windows: torch.Tensor, batch: int, bf16: bool) -> tuple[float, float]:
    """Wall and CPU seconds of scoring ``windows`` in batches of ``batch`` (CPU time: this process's, which
    other processes taking the cores do not inflate, their cache and memory traffic aside)."""
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for first in range(0, len(windows), batch):
            chunk = windows[first : first + batch]
            logits, _ = model(chunk[:, :-1])
            F.cross_entropy(logits.float().flatten(0, 1), chunk[:, 1:].flatten(), reduction="none")
    return time.perf_counter() - start, time.process_time() - cpu


def measure_width(width: int, args: argparse.Namespace) -> None:
    path = speed_path.choose(True, speed_path.Rung(d_model=width, steps=1, tokens_per_step=64))  # the sweep's rule
    bf16 = path.precision == "bf16-mixed"
    heads = max(4, width // 32)
    config = AndreaConfig(257, 64, d_model=width, n_layer=6, n_head=heads, cpu_attention_fp32=path.cpu_attention_fp32)
    model = Andrea(config).eval()
    windows = torch.randint(0, 257, (args.windows, 65))
    best = {batch: (float("inf"), float("inf")) for batch in args.batches}
    for _ in range(args.rounds):
        for batch in args.batches:
            wall, cpu = score_seconds(model, windows, batch, bf16)
            best[batch] = (min(best[batch][0], wall), min(best[batch][1], cpu))
    derived = eval_batch.eval_batch_size(config, 2 if bf16 else 4, eval_batch.memory_bound(torch.device("cpu")))
    name = "bf16 autocast" if bf16 else "fp32"
    print(f"d{width} {name}, {args.windows} windows: derived batch {derived}")
    for batch, (wall, cpu) in best.items():
        print(f"  batch {batch:5d}: {wall:6.2f} s wall, {cpu:6.2f} s CPU")


def setup_seconds() -> None:
    from andrea_lab.data.datamodule import AndreaDataModule
    from andrea_lab.fit.heldout import _byte_lengths, _documents_of

    data = AndreaDataModule(corpus="stdlib", tokenizer="byte", vocab_size=257, block_size=64, batch_size=32)
    data.prepare_data()
    data.setup("fit")
    for _ in range(2):
        start = time.perf_counter()
        dataset = data.heldout_dataset(262_144, 0)
        planned = time.perf_counter()
        _byte_lengths(data, torch.device("cpu"))
        _documents_of(dataset.plan, data)
        described = time.perf_counter()
        [dataset[i] for i in range(len(dataset))]
        read = time.perf_counter()
        print(
            f"set-up: plan {planned - start:.3f} s, bytes and names {described - planned:.3f} s; "
            f"reading all {len(dataset)} windows {read - described:.3f} s"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", default="64,256")
    parser.add_argument("--batches", default="8,16,32,64,128,512,1024")
    parser.add_argument("--windows", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-setup", action="store_true", help="skip the set-up timing (it reads the stdlib corpus)")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    torch.set_num_threads(args.threads)
    cache = eval_batch.last_level_cache_bytes()
    print(
        f"last-level cache {cache} bytes, bound {eval_batch.memory_bound(torch.device('cpu'))} bytes; "
        f"{args.threads} thread(s), torch {torch.__version__}"
    )
    for width in (int(w) for w in args.widths.split(",")):
        measure_width(width, args)
    if not args.no_setup:
        setup_seconds()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
