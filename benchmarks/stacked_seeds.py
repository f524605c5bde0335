"""Would training several seeds of one variant as one batched model be faster on the CPU?

Issue 29's idea: at d_model 64 the matmuls are tiny, so K models stacked with ``torch.func``
(``stack_module_state`` + ``vmap`` of ``grad_and_value``) might run closer to the CPU's peak than K
models one after another. This times one forward + backward of K cpu-base models (d_model 64, 6 layers,
batch 32 x 64) both ways, alternating round by round, and prints the medians and their ratio. The
optimizer step is left out (it would be the same either way) -- only the part stacking could speed up.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from typing import Optional, Sequence

import torch
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from andrea_lab.model.config import AndreaConfig
from andrea_lab.model.transformer import Andrea


def build(k: int, batch: int, seed: int = 0):
    """K cpu-base models, their batches, and the two ways to take one forward + backward of all of them."""
    torch.manual_seed(seed)
    config = AndreaConfig(vocab_size=257, block_size=64, d_model=64, n_layer=6, n_head=4)
    models = [Andrea(config) for _ in range(k)]
    x = torch.randint(0, 257, (k, batch, 64))
    y = torch.randint(0, 257, (k, batch, 64))
    params, buffers = stack_module_state(models)
    skeleton = copy.deepcopy(models[0]).to("meta")

    def loss(p, b, xi, yi):
        return functional_call(skeleton, (p, b), (xi, yi))[1]

    batched = vmap(grad_and_value(loss))

    def one_by_one() -> None:
        for i, model in enumerate(models):
            model.zero_grad(set_to_none=True)
            model(x[i], y[i])[1].backward()

    def stacked() -> None:
        batched(params, buffers, x, y)

    return {"one by one": one_by_one, "stacked (vmap)": stacked}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=5, help="models (seeds) at once (default 5: the suites' seeds)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ways = build(args.k, args.batch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for run in ways.values():
            run()  # warm-up, and the fallback warnings (ops vmap has no batching rule for)
    fallbacks = sorted(
        {
            str(w.message).split("batching rule for ")[1].split(".")[0]
            for w in caught
            if "batching rule for" in str(w.message)
        }
    )
    warnings.filterwarnings("ignore", message=".*batching rule.*")  # said once, above
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, run in ways.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    print(
        f"{args.k} cpu-base models, batch {args.batch} x 64, {args.threads} thread(s), torch {torch.__version__}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"ops without a vmap batching rule (run per model): {', '.join(fallbacks) or 'none'}")
    for name, values in times.items():
        print(f"{name:>15}: median {statistics.median(values):.3f} s per forward+backward of all {args.k}")
    ratio = statistics.median(times["one by one"]) / statistics.median(times["stacked (vmap)"])
    print(f"speed-up of stacking: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
