"""Memory bandwidth of the andrea-lab-cuda kernels, beside eager PyTorch and torch.compile.

    python benchmarks/kernel_bandwidth.py                       # bf16, 2^16 .. 2^28 elements
    python benchmarks/kernel_bandwidth.py --dtype float32 --ops gelu_fwd,layer_norm_fwd --json bench.json

Every op is memory bound, so the figure of merit is bandwidth: the exact number of bytes the op
must move (each input read once, each output written once: see ``OPS``), divided by the time of
one call. Each call is timed with CUDA events after warm-up, with the L2 cache flushed just
before it (a buffer of twice the L2 size is overwritten), so the data comes from HBM as it would
in a training step. The median of ``--reps`` calls is reported, as GB/s and as a fraction of the
device-to-device copy bandwidth measured in the same run (``dst.copy_(src)``: read n, write n,
the best copy rate over the run's sizes), for three implementations of the same op: the cuda
backend's kernels, eager PyTorch, and ``torch.compile`` of the eager code.

Targets (from the issue; see plugins/andrea-lab-cuda/README.md): at >= 2^24 elements, the
elementwise kernels (GELU, ReLU, SwiGLU, forward and backward) reach >= 80 % of the measured copy
bandwidth, the LayerNorm forward (and the fused add + LayerNorm) >= 70 %. The run prints whether
each target is met; ``--json PATH`` writes every measurement.

Needs a CUDA GPU, nvcc (the kernels are compiled on first use) and andrea-lab-cuda installed
(``pip install -e plugins/andrea-lab-cuda``); exits with a message saying which is missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch
import torch.nn.functional as F

ELEMENTWISE_TARGET = 0.80
LAYER_NORM_TARGET = 0.70
TARGET_MIN_ELEMENTS = 1 << 24
EPS = 1e-5


@dataclass
class Case:
    """One op at one size: the three implementations take the same tensors and move ``bytes``."""

    name: str
    elements: int  # elements of the op's main operand (for LayerNorm: rows * cols)
    bytes: int
    impls: dict[str, Callable[[], object]]
    target: float | None


def _bytes(t: torch.Tensor | int, dtype: torch.dtype | None = None) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    return t * torch.empty((), dtype=dtype).element_size()


EAGER: dict[str, Callable] = {
    "gelu_fwd": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_bwd": lambda dy, x: torch.ops.aten.gelu_backward(dy, x, approximate="tanh"),
    "relu_fwd": lambda x: F.relu(x),
    "relu_bwd": lambda dy, y: torch.ops.aten.threshold_backward(dy, y, 0),
    "swiglu_fwd": lambda gate, up: F.silu(gate) * up,
    "swiglu_bwd": lambda dout, gate, up: _swiglu_bwd_eager(dout, gate, up),
    "layer_norm_fwd": lambda x, w, b: torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, EPS),
    "layer_norm_bwd": lambda dy, x, mean, rstd, w, b: torch.ops.aten.native_layer_norm_backward(
        dy, x, [x.shape[-1]], mean, rstd, w, b, [True, True, True]
    ),
    "add_layer_norm_fwd": lambda x, d, w, b: _add_layer_norm_eager(x, d, w, b),
}


def make_case(op: str, n: int, dtype: torch.dtype, d_model: int, hidden: int, compiled: dict) -> Case:
    """Tensors and implementations of ``op`` with about ``n`` elements (whole rows for row ops).

    ``compiled`` caches one ``torch.compile`` of each eager function across sizes (PyTorch's
    automatic dynamic shapes then recompile it once for varying sizes, not once per size); it is
    None when the compile column is off.
    """

    def rand(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, device="cuda") * scale + shift).to(dtype)

    s = torch.empty((), dtype=dtype).element_size()
    if op in ("gelu_fwd", "gelu_bwd", "relu_fwd", "relu_bwd"):
        ours, args, nbytes, target = _elementwise_case(op, n, s, rand)
    elif op in ("swiglu_fwd", "swiglu_bwd"):
        n = max(1, n // hidden) * hidden
        ours, args, nbytes, target = _swiglu_case(op, n // hidden, hidden, s, rand)
    else:
        n = max(1, n // d_model) * d_model
        ours, args, nbytes, target = _layer_norm_case(op, n // d_model, d_model, dtype, s, rand)
    eager = EAGER[op]
    impls: dict[str, Callable[[], object]] = {"cuda": ours, "eager": lambda: eager(*args)}
    if compiled is not None:
        if op not in compiled:
            compiled[op] = torch.compile(eager)
        fn = compiled[op]
        impls["compile"] = lambda: fn(*args)
    return Case(op, n, nbytes, impls, target)


def _elementwise_case(op: str, n: int, s: int, rand: Callable):
    """(our call, the eager op's arguments, bytes moved, target) for GELU / ReLU."""
    from andrea_lab_cuda import ops

    x = rand(n, scale=2.0)
    if op == "gelu_fwd":  # read x, write y
        return (lambda: ops.gelu_tanh_forward(x)), (x,), 2 * n * s, ELEMENTWISE_TARGET
    if op == "relu_fwd":
        return (lambda: ops.relu_forward(x)), (x,), 2 * n * s, ELEMENTWISE_TARGET
    dy = rand(n)
    if op == "gelu_bwd":  # read dy, x; write dx
        return (lambda: ops.gelu_tanh_backward(dy, x)), (dy, x), 3 * n * s, ELEMENTWISE_TARGET
    y = F.relu(x)  # read dy, y; write dx
    return (lambda: ops.relu_backward(dy, y)), (dy, y), 3 * n * s, ELEMENTWISE_TARGET


def _swiglu_case(op: str, rows: int, hidden: int, s: int, rand: Callable):
    from andrea_lab_cuda import ops

    n = rows * hidden
    gate, up = rand(rows, 2 * hidden, scale=2.0).chunk(2, -1)  # as the model calls it: row-strided views of h
    if op == "swiglu_fwd":  # read gate, up; write out
        return (lambda: ops.swiglu_forward(gate, up)), (gate, up), 3 * n * s, ELEMENTWISE_TARGET
    dout = rand(rows, hidden)  # read dout, gate, up; write dgate, dup
    return (lambda: ops.swiglu_backward(dout, gate, up)), (dout, gate, up), 5 * n * s, ELEMENTWISE_TARGET


def _layer_norm_case(op: str, rows: int, d_model: int, dtype: torch.dtype, s: int, rand: Callable):
    from andrea_lab_cuda import ops

    n = rows * d_model
    x = rand(rows, d_model, scale=2.0, shift=0.5)
    w, b = rand(d_model, scale=0.1, shift=1.0), rand(d_model, scale=0.1)
    params = 2 * d_model * s  # weight and bias (or dweight and dbias)
    stats = 2 * rows * 4  # mean and rstd, fp32
    if op == "layer_norm_fwd":  # read x, w, b; write y, mean, rstd
        return (
            (lambda: ops.layer_norm_forward(x, None, w, b, EPS)),
            (x, w, b),
            2 * n * s + params + stats,
            LAYER_NORM_TARGET,
        )
    if op == "add_layer_norm_fwd":  # read x, delta, w, b; write sum, y, mean, rstd
        delta = rand(rows, d_model)
        return (
            (lambda: ops.layer_norm_forward(x, delta, w, b, EPS)),
            (x, delta, w, b),
            4 * n * s + params + stats,
            LAYER_NORM_TARGET,
        )
    if op != "layer_norm_bwd":
        raise ValueError(op)
    dy = rand(rows, d_model)  # read dy, x, w, mean, rstd; write dx, dw, db
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [d_model], w, b, EPS)
    mean_flat, rstd_flat = mean.reshape(-1).float().contiguous(), rstd.reshape(-1).float().contiguous()
    ours = lambda: ops.layer_norm_backward(dy, x, mean_flat, rstd_flat, w, dtype, None, True, True)  # noqa: E731
    return ours, (dy, x, mean, rstd, w, b), 3 * n * s + 3 * d_model * s + stats, None


def _add_layer_norm_eager(x, delta, w, b):
    summed = x + delta
    return summed, F.layer_norm(summed, summed.shape[-1:], w, b, EPS)


def _swiglu_bwd_eager(dout, gate, up):
    s = torch.sigmoid(gate)
    return dout * up * (s * (1 + gate * (1 - s))), dout * gate * s


#: The documented targets (fraction of the measured copy bandwidth at >= 2^24 elements); the
#: LayerNorm backward has none (it is reported, not judged).
TARGETS = {
    "gelu_fwd": ELEMENTWISE_TARGET,
    "gelu_bwd": ELEMENTWISE_TARGET,
    "relu_fwd": ELEMENTWISE_TARGET,
    "relu_bwd": ELEMENTWISE_TARGET,
    "swiglu_fwd": ELEMENTWISE_TARGET,
    "swiglu_bwd": ELEMENTWISE_TARGET,
    "layer_norm_fwd": LAYER_NORM_TARGET,
    "add_layer_norm_fwd": LAYER_NORM_TARGET,
}

OPS = [
    "gelu_fwd",
    "gelu_bwd",
    "relu_fwd",
    "relu_bwd",
    "swiglu_fwd",
    "swiglu_bwd",
    "layer_norm_fwd",
    "layer_norm_bwd",
    "add_layer_norm_fwd",
]


class Timer:
    """Median time of ``fn`` in ms, with CUDA events, warm-up and an L2 flush before every call."""

    def __init__(self, l2_bytes: int, warmup: int, reps: int):
        self.flush = torch.empty(max(2 * l2_bytes, 1 << 26) // 4, dtype=torch.int32, device="cuda")
        self.warmup, self.reps = warmup, reps

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for start, end in zip(starts, ends):
            self.flush.zero_()  # evict the operands from L2: the timed call reads from HBM
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


@dataclass
class Result:
    op: str
    impl: str
    elements: int
    bytes: int
    ms: float
    gbps: float
    fraction_of_copy: float


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of: {', '.join(OPS)}")
    p.add_argument("--min-log2", type=int, default=16, help="smallest size, log2 of elements (default 16)")
    p.add_argument("--max-log2", type=int, default=28, help="largest size, log2 of elements (default 28)")
    p.add_argument("--step-log2", type=int, default=2, help="size step, in powers of two (default 2)")
    p.add_argument("--d-model", type=int, default=768, help="LayerNorm width (default 768, ANDREA's)")
    p.add_argument("--hidden", type=int, default=2048, help="SwiGLU hidden size (default 2048, ANDREA's at 8/3)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--json", metavar="PATH", help="write every measurement to PATH as JSON")
    return p.parse_args(argv)


def fail(message: str) -> None:
    print(f"benchmarks/kernel_bandwidth.py: {message}", file=sys.stderr)
    sys.exit(2)


def check_backend() -> str:
    """The cuda backend's availability reason; exits with a message saying what is missing."""
    if not torch.cuda.is_available():
        fail(
            f"needs a CUDA GPU, and torch.cuda.is_available() is False (PyTorch {torch.__version__}, "
            f"CUDA {torch.version.cuda or 'none: a CPU-only build'}); run it on a machine with an NVIDIA GPU"
        )
    try:
        from andrea_lab_cuda import CudaBackend
    except ImportError as exc:
        fail(f"andrea-lab-cuda is not installed ({exc}); pip install -e plugins/andrea-lab-cuda")
    avail = CudaBackend.availability()
    if not avail:
        fail(f"the cuda kernel backend is not available: {avail.reason}")
    return avail.reason


def measure_copy(sizes: list[int], dtype: torch.dtype, timer: Timer) -> dict[int, float]:
    """GB/s of a device-to-device copy (read n, write n) at each size: the 100 % of the fractions."""
    copy_gbps = {}
    for n in sizes:
        src = torch.empty(n, dtype=dtype, device="cuda").normal_()
        dst = torch.empty_like(src)
        ms = timer(lambda dst=dst, src=src: dst.copy_(src))
        copy_gbps[n] = 2 * _bytes(src) / ms / 1e6
    return copy_gbps


def measure_op(
    op: str, sizes: list[int], args: argparse.Namespace, timer: Timer, peak_copy: float, compiled: dict | None
) -> tuple[list[Result], dict | None]:
    """Every size of one op, printed as a row each; the results and the op's target verdict."""
    dtype = getattr(torch, args.dtype)
    print(f"{op:<20}{'elements':>12}" + "".join(f"{impl:>22}" for impl in ("cuda", "eager", "compile")))
    results: list[Result] = []
    for n in sizes:
        try:
            case = make_case(op, n, dtype, args.d_model, args.hidden, compiled)
        except torch.cuda.OutOfMemoryError:
            print(f"{'':<20}{n:>12}  out of memory, skipped")
            torch.cuda.empty_cache()
            continue
        row = f"{'':<20}{case.elements:>12}"
        for impl in ("cuda", "eager", "compile"):
            fn = case.impls.get(impl)
            if fn is None:
                row += f"{'-':>22}"
                continue
            ms = timer(fn)
            gbps = case.bytes / ms / 1e6
            results.append(Result(op, impl, case.elements, case.bytes, ms, gbps, gbps / peak_copy))
            row += f"{gbps:>11.0f} GB/s {gbps / peak_copy:>5.0%}"
        print(row)
        del case
        torch.cuda.empty_cache()
    return results, verdict(op, results)


def verdict(op: str, results: list[Result]) -> dict | None:
    """Whether the op's kernel meets its target at >= 2^24 elements (worst size counts); None without one."""
    target = TARGETS.get(op)
    large = [r.fraction_of_copy for r in results if r.impl == "cuda" and r.elements >= TARGET_MIN_ELEMENTS]
    if target is None or not large:
        return None
    worst = min(large)
    print(
        f"{'':<20}target >= {target:.0%} of copy at >= 2^24 elements: "
        f"{'met' if worst >= target else 'NOT met'} (worst {worst:.0%})"
    )
    return {"op": op, "target": target, "worst_fraction_at_2^24_plus": worst, "met": worst >= target}


def report_json(
    device: str,
    sms: int,
    l2_bytes: int,
    args: argparse.Namespace,
    backend: str,
    copy_gbps: dict[int, float],
    peak_copy: float,
    verdicts: list[dict],
    results: list[Result],
) -> dict:
    """What ``--json`` writes (benchmarks/gpu_check.py reads it; docs/kernels.md describes it)."""
    return {
        "device": device,
        "sms": sms,
        "l2_bytes": l2_bytes,
        "dtype": args.dtype,
        "d_model": args.d_model,
        "hidden": args.hidden,
        "reps": args.reps,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "backend": backend,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "copy_gbps": {str(n): g for n, g in copy_gbps.items()},
        "copy_peak_gbps": peak_copy,
        "targets": verdicts,
        "results": [asdict(r) for r in results],
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    backend = check_backend()
    ops_wanted = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = sorted(set(ops_wanted) - set(OPS))
    if unknown:
        fail(f"unknown ops {unknown}; valid: {', '.join(OPS)}")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or 64 << 20)
    sizes = [1 << k for k in range(args.min_log2, args.max_log2 + 1, args.step_log2)]
    timer = Timer(l2, args.warmup, args.reps)
    compiled: dict | None = None if args.no_compile else {}
    print(f"{props.name}: {props.multi_processor_count} SMs, L2 {l2 / 2**20:.0f} MiB, {args.dtype}; {backend}")
    copy_gbps = measure_copy(sizes, getattr(torch, args.dtype), timer)
    peak_copy = max(copy_gbps.values())
    print("copy  " + "  ".join(f"2^{n.bit_length() - 1}: {g:7.0f} GB/s" for n, g in copy_gbps.items()))
    print(f"measured copy bandwidth: {peak_copy:.0f} GB/s (the 100 % below)\n")
    results: list[Result] = []
    verdicts = []
    for op in ops_wanted:
        op_results, op_verdict = measure_op(op, sizes, args, timer, peak_copy, compiled)
        results += op_results
        verdicts += [op_verdict] if op_verdict else []
        print()
    if args.json:
        from andrea_lab.files import write_json_atomic

        write_json_atomic(
            args.json,
            report_json(
                props.name, props.multi_processor_count, l2, args, backend, copy_gbps, peak_copy, verdicts, results
            ),
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
