"""GPU checks of every kernel against a float64 reference, of the LayerNorm backward against
autograd, of 50 training steps against the torch backend, and of determinism.

All marked ``gpu``: skipped without a CUDA device. On a GPU machine without nvcc they are skipped
with that reason; on one with nvcc, the backend must be available (a build failure fails here).

Tolerances are scaled to the dtype: a kernel computes in fp32 and rounds once, so its output is
within about one unit in the last place (ulp) of the exact result. We compare with the float64
result of the same (already rounded) inputs and allow ``RTOL[dtype]`` relative error plus
``RTOL[dtype]`` times the largest magnitude (at least 1) as absolute error (for values near zero):
fp32 1e-5 (fp32 arithmetic, not 1 ulp: e.g. LayerNorm's mean/variance round), fp16 2e-3 (2 ulp),
bf16 1.6e-2 (2 ulp).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import andrea_lab
from andrea_lab.builtin.backends import TorchBackend
from andrea_lab_cuda import CudaBackend, build, ops

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
ELEMENTWISE_SIZES = [1, 3, 8, 9, 31, 1000, 4097, 65539, (1 << 20) + 5]
D_MODELS = [64, 127, 128, 320, 768, 1000, 1024, 2048, 3072, 4096, 8192]
#: Largest |loss difference| allowed between the cuda and torch backends over 50 fp32 AdamW steps.
TRAIN_LOSS_ATOL = 1e-3


@pytest.fixture(scope="module")
def cuda() -> CudaBackend:
    if build.find_nvcc() is None:
        pytest.skip("no nvcc: the kernels cannot be compiled on this GPU machine")
    avail = CudaBackend.availability()
    if not avail and "update the driver" in avail.reason:
        pytest.skip(avail.reason)  # the machine's driver is older than its nvcc: not a kernel problem
    assert avail, avail.reason
    return CudaBackend()


def assert_near(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str, k: float = 1.0) -> None:
    """|actual - expected| <= k * RTOL * (|expected| + max(max|expected|, 1)), elementwise.

    The absolute part covers values near zero, whose relative error is large for any fp32
    implementation (e.g. GELU at x = -5: 1 + tanh(...) cancels), PyTorch's included.
    """
    assert actual.shape == expected.shape, what
    a, e = actual.double(), expected.double()
    rtol = k * RTOL[dtype]
    bound = rtol * (e.abs() + e.abs().max().clamp_min(1.0))
    err = (a - e).abs()
    worst = (err - bound).argmax()
    assert bool((err <= bound).all()), (f"{what} ({dtype}): max error {err.max().item():.3g}, at index "
                                        f"{worst.item()}: got {a.flatten()[worst].item():.8g}, expected "
                                        f"{e.flatten()[worst].item():.8g} (rtol {rtol:.3g})")


def randn(*shape, dtype=torch.float32, scale=1.0, shift=0.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=g, device="cuda") * scale + shift).to(dtype)


def misaligned(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` whose data starts one element past a 16-byte boundary (forces scalar loads)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    out = buf[1:].view(t.shape)
    out.copy_(t)
    assert out.data_ptr() % 16 != 0
    return out


def grads_of(fn, inputs: list[torch.Tensor], grad_out) -> list[torch.Tensor | None]:
    leaves = [t.detach().requires_grad_() if t is not None else None for t in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    gouts = grad_out if isinstance(grad_out, tuple) else (grad_out,)
    torch.autograd.backward(outs, gouts)
    return [t.grad if t is not None else None for t in leaves]


# -- GELU / ReLU ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ELEMENTWISE_SIZES)
def test_gelu_tanh_forward_and_backward(cuda, dtype, n):
    x = randn(n, dtype=dtype, scale=3.0, seed=n)
    dy = randn(n, dtype=dtype, seed=n + 1)
    x64 = x.double().requires_grad_()
    y64 = F.gelu(x64, approximate="tanh")
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    for variant, xin in (("aligned", x), ("misaligned", misaligned(x))):
        y = cuda.gelu_tanh(xin)
        assert y.dtype == dtype and y.shape == x.shape
        assert_near(y, y64, dtype, f"gelu forward, {variant}, n={n}")
        (dx,) = grads_of(cuda.gelu_tanh, [xin], dy)
        assert_near(dx, dx64, dtype, f"gelu backward, {variant}, n={n}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ELEMENTWISE_SIZES)
def test_relu_forward_and_backward_are_exact(cuda, dtype, n):
    x = randn(n, dtype=dtype, seed=n)
    dy = randn(n, dtype=dtype, seed=n + 1)
    for xin in (x, misaligned(x)):
        assert torch.equal(cuda.relu(xin), F.relu(x))
        (dx,) = grads_of(cuda.relu, [xin], dy)
        (ref,) = grads_of(F.relu, [x], dy)
        assert torch.equal(dx, ref)


def test_non_contiguous_input(cuda):
    x = randn(64, 96, scale=2.0).t()  # (96, 64), column-major
    assert not x.is_contiguous()
    assert_near(cuda.gelu_tanh(x), F.gelu(x.double(), approximate="tanh"), torch.float32, "gelu on x.t()")


def test_ops_run_on_the_current_stream(cuda):
    x = randn(1 << 20, scale=2.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = cuda.gelu_tanh(x)
        z = cuda.layer_norm(x.view(1024, 1024), None, None, 1e-5)
    torch.cuda.current_stream().wait_stream(side)
    assert_near(y, F.gelu(x.double(), approximate="tanh"), torch.float32, "gelu on a side stream")
    assert_near(z, F.layer_norm(x.view(1024, 1024).double(), (1024,)), torch.float32, "layer_norm on a side stream")


# -- SwiGLU --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", [(1, 1), (1, 4097), (5, 7), (129, 64), (33, 341), (64, 344), (16, 2048),
                                         (3, 5461)])
def test_swiglu_on_chunked_and_contiguous_inputs(cuda, dtype, rows, hidden):
    h = randn(rows, 2 * hidden, dtype=dtype, scale=2.0, seed=hidden)
    dout = randn(rows, hidden, dtype=dtype, seed=hidden + 1)
    gate, up = h.chunk(2, dim=-1)
    g64, u64 = gate.double().requires_grad_(), up.double().requires_grad_()
    out64 = F.silu(g64) * u64
    dg64, du64 = torch.autograd.grad(out64, (g64, u64), dout.double())
    cases = {"chunked views of h": (gate, up), "contiguous": (gate.contiguous(), up.contiguous()),
             "misaligned": (misaligned(gate.contiguous()), misaligned(up.contiguous()))}
    for name, (g, u) in cases.items():
        out = cuda.swiglu(g, u)
        assert out.dtype == dtype and out.shape == (rows, hidden)
        assert_near(out, out64, dtype, f"swiglu forward, {name}, {rows}x{hidden}")
        dg, du = grads_of(cuda.swiglu, [g, u], dout)
        assert_near(dg, dg64, dtype, f"swiglu dgate, {name}, {rows}x{hidden}", k=2)
        assert_near(du, du64, dtype, f"swiglu dup, {name}, {rows}x{hidden}")


# -- LayerNorm -----------------------------------------------------------------------------------------
def ln_inputs(rows, cols, dtype, affine, seed=0):
    x = randn(rows, cols, dtype=dtype, scale=3.0, shift=1.5, seed=seed)  # |mean| ~ std: two-pass matters
    w = randn(cols, dtype=dtype, scale=0.2, shift=1.0, seed=seed + 1) if affine in ("both", "weight") else None
    b = randn(cols, dtype=dtype, scale=0.2, seed=seed + 2) if affine == "both" else None
    return x, w, b


def ln64(x, w, b, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], w, b, eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", D_MODELS)
def test_layer_norm_forward(cuda, dtype, cols):
    for rows, affine in ((37, "both"), (5, "weight"), (3, "none")):
        x, w, b = ln_inputs(rows, cols, dtype, affine, seed=cols)
        expected = ln64(x.double(), w.double() if w is not None else None, b.double() if b is not None else None)
        y = cuda.layer_norm(x, w, b, 1e-5)
        assert y.dtype == dtype
        assert_near(y, expected, dtype, f"layer_norm forward {rows}x{cols} ({affine})")
        assert_near(cuda.layer_norm(misaligned(x), w, b, 1e-5), expected, dtype,
                    f"layer_norm forward misaligned {rows}x{cols} ({affine})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", D_MODELS)
def test_layer_norm_backward_against_autograd(cuda, dtype, cols):
    """The analytic backward (dx, dgamma, dbeta) against autograd through float64 LayerNorm."""
    for rows, affine in ((300, "both"), (7, "weight"), (4, "none")):
        x, w, b = ln_inputs(rows, cols, dtype, affine, seed=cols)
        dy = randn(rows, cols, dtype=dtype, seed=cols + 7)
        expected = grads_of(ln64, [x.double(), w.double() if w is not None else None,
                                   b.double() if b is not None else None], dy.double())
        got = grads_of(lambda x_, w_, b_: cuda.layer_norm(x_, w_, b_, 1e-5), [x, w, b], dy)
        for name, g, e in zip(("dx", "dweight", "dbias"), got, expected):
            assert (g is None) == (e is None), name
            if g is not None:
                assert g.dtype == dtype
                assert_near(g, e, dtype, f"layer_norm {name} {rows}x{cols} ({affine})", k=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [64, 127, 768, 4096])
def test_add_layer_norm_forward_and_backward(cuda, dtype, cols):
    rows = 65
    x, w, b = ln_inputs(rows, cols, dtype, "both", seed=cols)
    delta = randn(rows, cols, dtype=dtype, seed=cols + 3)
    gs, gy = randn(rows, cols, dtype=dtype, seed=cols + 4), randn(rows, cols, dtype=dtype, seed=cols + 5)
    summed, normed = cuda.add_layer_norm(x, delta, w, b, 1e-5)
    assert torch.equal(summed, x + delta)  # one rounding of the fp32 sum, like eager
    assert_near(normed, ln64(summed.double(), w.double(), b.double()), dtype, f"add_layer_norm forward {cols}")

    def ref(x_, d_, w_, b_):
        s = x_ + d_
        return s, ln64(s, w_, b_)

    expected = grads_of(ref, [x.double(), delta.double(), w.double(), b.double()], (gs.double(), gy.double()))
    got = grads_of(lambda *t: cuda.add_layer_norm(*t, 1e-5), [x, delta, w, b], (gs, gy))
    for name, g, e in zip(("dx", "ddelta", "dweight", "dbias"), got, expected):
        assert_near(g, e, dtype, f"add_layer_norm {name} {cols}", k=2)


def test_layer_norm_backward_is_deterministic(cuda):
    x, w, b = ln_inputs(4096, 768, torch.float32, "both")
    dy = randn(4096, 768, seed=9)
    first = grads_of(lambda *t: cuda.layer_norm(*t, 1e-5), [x, w, b], dy)
    for _ in range(3):
        again = grads_of(lambda *t: cuda.layer_norm(*t, 1e-5), [x, w, b], dy)
        assert all(torch.equal(a, g) for a, g in zip(first, again))


def test_cuda_tensors_go_through_the_kernels(cuda, monkeypatch):
    calls = []
    for name in ("gelu_tanh_forward", "relu_forward", "swiglu_forward", "layer_norm_forward",
                 "gelu_tanh_backward", "relu_backward", "swiglu_backward", "layer_norm_backward"):
        original = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _n=name, _f=original, **k: calls.append(_n) or _f(*a, **k))
    x = randn(4, 256).requires_grad_()
    w = torch.ones(256, device="cuda", requires_grad=True)
    h = randn(4, 512).requires_grad_()
    loss = (cuda.gelu_tanh(x).sum() + cuda.relu(x).sum() + cuda.swiglu(*h.chunk(2, -1)).sum()
            + cuda.layer_norm(x, w, None, 1e-5).square().sum() + cuda.add_layer_norm(x, x, w, None, 1e-5)[1].sum())
    loss.backward()
    assert sorted(set(calls)) == sorted({"gelu_tanh_forward", "relu_forward", "swiglu_forward", "layer_norm_forward",
                                         "gelu_tanh_backward", "relu_backward", "swiglu_backward",
                                         "layer_norm_backward"})


def test_autocast_layer_norm_runs_in_fp32_like_pytorch(cuda):
    x, w, b = ln_inputs(16, 768, torch.bfloat16, "both")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours = cuda.layer_norm(x, w.float(), b.float(), 1e-5)
        theirs = TorchBackend().layer_norm(x, w.float(), b.float(), 1e-5)
    assert ours.dtype == theirs.dtype == torch.float32
    assert_near(ours, theirs, torch.float32, "layer_norm under autocast")


# -- training ------------------------------------------------------------------------------------------
def train(kernel_backend: str, placement: str, activation: str, steps: int = 50, seed: int = 0) -> list[float]:
    """``steps`` plain AdamW steps of andrea-tiny on a learnable token pattern; the losses."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(seed)
    config = andrea_lab.preset("andrea-tiny", kernel_backend=kernel_backend, norm_placement=placement,
                               activation=activation)
    model = andrea_lab.Andrea(config).to("cuda")  # built on the CPU, then moved: as Lightning does
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    g = torch.Generator().manual_seed(seed + 1)
    starts = torch.randint(0, 1000, (steps, 8, 1), generator=g)
    strides = torch.randint(1, 7, (steps, 8, 1), generator=g)
    tokens = ((starts + strides * torch.arange(65)) % 1000).cuda()  # arithmetic sequences: learnable
    losses = []
    with sdpa_kernel(SDPBackend.MATH):  # a deterministic attention backward
        for step in range(steps):
            _, loss = model(tokens[step, :, :-1], tokens[step, :, 1:])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


@pytest.mark.slow
@pytest.mark.parametrize("placement,activation", [("pre", "gelu"), ("post", "swiglu"), ("pre", "relu")])
def test_fifty_training_steps_match_the_torch_backend(cuda, placement, activation):
    ours = train("cuda", placement, activation)
    reference = train("torch", placement, activation)
    assert ours[-1] < ours[0] - 0.5, "the model must learn"
    worst = max(abs(a - b) for a, b in zip(ours, reference))
    assert worst <= TRAIN_LOSS_ATOL, f"losses differ by up to {worst:.3g} (allowed {TRAIN_LOSS_ATOL})"


@pytest.mark.slow
def test_repeated_training_runs_are_bit_identical(cuda):
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        first = train("cuda", "post", "swiglu", steps=20)
        second = train("cuda", "post", "swiglu", steps=20)
    finally:
        torch.use_deterministic_algorithms(previous)
    assert first == second
    assert all(math.isfinite(v) for v in first)


# -- the benchmark script runs (small sizes only: a smoke test, not a measurement) --------------------
@pytest.mark.slow
def test_the_benchmark_runs_and_writes_json(cuda, benchmark_module, tmp_path):
    import json

    bench = benchmark_module
    out = tmp_path / "bench.json"
    assert bench.main(["--min-log2", "16", "--max-log2", "18", "--reps", "3", "--warmup", "1", "--no-compile",
                       "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["copy_peak_gbps"] > 0
    ops_seen = {(r["op"], r["impl"]) for r in data["results"]}
    assert {(op, impl) for op in bench.OPS for impl in ("cuda", "eager")} <= ops_seen
    assert all(r["gbps"] > 0 for r in data["results"])
