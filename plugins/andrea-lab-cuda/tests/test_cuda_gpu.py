"""GPU checks of every kernel against a float64 reference, of the LayerNorm backward against
autograd, of training against the torch backend (fp32, bf16, bf16 autocast), of streams, CUDA graph
capture, torch.compile and host threads, and of determinism.

All marked ``gpu``: skipped without a CUDA device, and failed instead with ``ANDREA_REQUIRE_GPU=1``
(andrea-lab's pytest plugin, and the ``cuda`` fixture below for the reasons it finds itself). On a
GPU machine with nvcc, the backend must be available (a build failure fails here).

Tolerances, per element (:func:`assert_rounded_once`): a kernel computes in fp32 and rounds once, so
its output is within about one unit in the last place (ulp) of the exact result rounded to the
dtype. The reference is that: the float64 result of the same (already rounded) inputs, rounded once
to the dtype. Each element may differ from it by ``ulps`` ulps of its own magnitude plus a small
multiple of fp32's epsilon times the magnitude of the terms that produced it (``scale``: where
terms cancel, e.g. LayerNorm's ``x̂·w + b`` near zero, fp32 arithmetic cannot do better). No bound
scales with the tensor's largest value, so values near zero are checked as tightly as they can be.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F

import andrea_lab.plugin as plugin
from andrea_lab.plugin import REQUIRE_GPU_ENV_VAR, TorchBackend, require_gpu
from andrea_lab_cuda import CudaBackend, _lib, build, ops

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
ELEMENTWISE_SIZES = [1, 3, 8, 9, 31, 1000, 4097, 65539, (1 << 20) + 5]
D_MODELS = [64, 127, 128, 320, 768, 1000, 1024, 2048, 3072, 4096, 8192]
#: Largest |loss difference| allowed between the cuda and torch backends over 50 fp32 AdamW steps.
TRAIN_LOSS_ATOL = 1e-3
#: Largest mean |loss difference| over 30 bf16 steps (bf16 weights, or bf16 autocast): the kernels
#: round once where eager PyTorch rounds twice, so the runs drift apart by about a bf16 ulp of the loss.
BF16_TRAIN_LOSS_ATOL = 5e-2
EPS32 = torch.finfo(torch.float32).eps


def _skip_or_fail(reason: str) -> None:
    if require_gpu():
        pytest.fail(f"{REQUIRE_GPU_ENV_VAR}=1, but the cuda backend cannot be tested here: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cuda() -> CudaBackend:
    if build.find_nvcc() is None:
        _skip_or_fail("no nvcc: the kernels cannot be compiled on this GPU machine")
    avail = CudaBackend.availability()
    if not avail and "update the driver" in avail.reason:
        _skip_or_fail(avail.reason)  # the machine's driver is older than its nvcc: not a kernel problem
    assert avail, avail.reason
    return CudaBackend()


def assert_near(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str, k: float = 1.0) -> None:
    """A looser, whole-tensor bound for comparisons with another implementation (not with the exact
    result): |actual - expected| <= k * RTOL * (|expected| + max(max|expected|, 1)), elementwise."""
    assert actual.shape == expected.shape, what
    a, e = actual.double(), expected.double()
    rtol = k * RTOL[dtype]
    bound = rtol * (e.abs() + e.abs().max().clamp_min(1.0))
    err = (a - e).abs()
    worst = (err - bound).argmax()
    assert bool((err <= bound).all()), (
        f"{what} ({dtype}): max error {err.max().item():.3g}, at index "
        f"{worst.item()}: got {a.flatten()[worst].item():.8g}, expected "
        f"{e.flatten()[worst].item():.8g} (rtol {rtol:.3g})"
    )


def ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of ``dtype`` at each value's magnitude (subnormals: the smallest normal's)."""
    info = torch.finfo(dtype)
    magnitude = values.double().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(magnitude))) * info.eps


def assert_rounded_once(
    actual: torch.Tensor, exact: torch.Tensor, scale: torch.Tensor, what: str, ulps: float = 1.0, terms: float = 64.0
) -> None:
    """Per element: |actual - exact rounded to actual's dtype| <= ulps * ulp + terms * eps32 * |scale|.

    ``exact`` is the float64 result of the same inputs; ``scale`` the float64 magnitude of the terms
    that made each element (see the module docstring).
    """
    dtype = actual.dtype
    assert actual.shape == exact.shape == scale.shape, what
    expected = exact.to(dtype).double()
    bound = ulps * ulp(expected, dtype) + terms * EPS32 * scale.double().abs()
    err = (actual.double() - expected).abs()
    worst = int((err - bound).argmax())
    assert bool((err <= bound).all()), (
        f"{what} ({dtype}): {int((err > bound).sum())} elements out of bounds; worst at index {worst}: got "
        f"{actual.double().flatten()[worst].item():.8g}, expected {expected.flatten()[worst].item():.8g} "
        f"(bound {bound.flatten()[worst].item():.3g})"
    )


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
    x64, dy64 = x.double(), dy.double()
    y_scale = x64.abs()
    dx_scale = dy64.abs() * (1 + x64.abs() + 0.2 * x64.abs() ** 3)  # (1 - t^2) x (1 + 3 k x^2) cancels in fp32
    for variant, xin in (("aligned", x), ("misaligned", misaligned(x))):
        y = cuda.gelu_tanh(xin)
        assert y.dtype == dtype and y.shape == x.shape
        assert_rounded_once(y, y64.detach(), y_scale, f"gelu forward, {variant}, n={n}")
        (dx,) = grads_of(cuda.gelu_tanh, [xin], dy)
        assert_rounded_once(dx, dx64, dx_scale, f"gelu backward, {variant}, n={n}")


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
    """The input is written on a side stream after a long sleep there; a kernel launched on any other
    stream (the default stream is idle) would read it before the write and see NaN."""
    src = randn(1 << 20, scale=2.0)
    x = torch.full_like(src, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # src and the NaN fill are done before the side stream goes on
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # tens of ms of GPU clock cycles
        x.copy_(src)
        y = cuda.gelu_tanh(x)
        z = cuda.layer_norm(x.view(1024, 1024), None, None, 1e-5)
        s_, n_ = cuda.add_layer_norm(x.view(1024, 1024), x.view(1024, 1024), None, None, 1e-5)
    torch.cuda.current_stream().wait_stream(side)
    assert not y.isnan().any() and not z.isnan().any() and not n_.isnan().any(), "a kernel ran on another stream"
    assert_near(y, F.gelu(src.double(), approximate="tanh"), torch.float32, "gelu on a side stream")
    assert_near(z, F.layer_norm(src.view(1024, 1024).double(), (1024,)), torch.float32, "layer_norm on a side stream")
    assert torch.equal(s_, 2 * src.view(1024, 1024))


# -- SwiGLU --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "rows,hidden", [(1, 1), (1, 4097), (5, 7), (129, 64), (33, 341), (64, 344), (16, 2048), (3, 5461)]
)
def test_swiglu_on_chunked_and_contiguous_inputs(cuda, dtype, rows, hidden):
    h = randn(rows, 2 * hidden, dtype=dtype, scale=2.0, seed=hidden)
    dout = randn(rows, hidden, dtype=dtype, seed=hidden + 1)
    gate, up = h.chunk(2, dim=-1)
    g64, u64 = gate.double().requires_grad_(), up.double().requires_grad_()
    out64 = F.silu(g64) * u64
    dg64, du64 = torch.autograd.grad(out64, (g64, u64), dout.double())
    cases = {
        "chunked views of h": (gate, up),
        "contiguous": (gate.contiguous(), up.contiguous()),
        "misaligned": (misaligned(gate.contiguous()), misaligned(up.contiguous())),
    }
    g64d, u64d, d64 = gate.double(), up.double(), dout.double()
    sig = torch.sigmoid(g64d)
    scales = {
        "out": (g64d * sig * u64d).abs(),
        "dgate": (d64 * u64d).abs() * sig * (1 + g64d.abs()),
        "dup": (d64 * g64d * sig).abs(),
    }
    for name, (g, u) in cases.items():
        out = cuda.swiglu(g, u)
        assert out.dtype == dtype and out.shape == (rows, hidden)
        assert_rounded_once(out, out64.detach(), scales["out"], f"swiglu forward, {name}, {rows}x{hidden}")
        dg, du = grads_of(cuda.swiglu, [g, u], dout)
        assert_rounded_once(dg, dg64, scales["dgate"], f"swiglu dgate, {name}, {rows}x{hidden}")
        assert_rounded_once(du, du64, scales["dup"], f"swiglu dup, {name}, {rows}x{hidden}")


# -- LayerNorm -----------------------------------------------------------------------------------------
def ln_inputs(rows, cols, dtype, affine, seed=0):
    x = randn(rows, cols, dtype=dtype, scale=3.0, shift=1.5, seed=seed)  # |mean| ~ std: two-pass matters
    w = randn(cols, dtype=dtype, scale=0.2, shift=1.0, seed=seed + 1) if affine in ("both", "weight") else None
    b = randn(cols, dtype=dtype, scale=0.2, seed=seed + 2) if affine == "both" else None
    return x, w, b


def ln64(x, w, b, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], w, b, eps)


def ln_exact(x, w, b, dy=None, dres=None, eps=1e-5) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{output: (exact float64 value, scale of its terms)} of LayerNorm of the rows of ``x`` (already
    rounded inputs), and with ``dy`` of its backward (dx [+ dres], dweight, dbias)."""
    x64 = x.double()
    cols = x.shape[-1]
    w64 = w.double() if w is not None else torch.ones(cols, dtype=torch.float64, device=x.device)
    b64 = b.double() if b is not None else torch.zeros(cols, dtype=torch.float64, device=x.device)
    mean = x64.mean(-1, keepdim=True)
    rstd = ((x64 - mean).square().mean(-1, keepdim=True) + eps).rsqrt()
    xhat = (x64 - mean) * rstd
    xhat_err = xhat.abs() + x64.abs() * rstd  # what fp32 mean / rstd errors scale with
    out = {"y": (xhat * w64 + b64, xhat_err * w64.abs() + b64.abs())}
    if dy is None:
        return out
    dy64 = dy.double()
    g = dy64 * w64
    gx = (g * xhat).mean(-1, keepdim=True)
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * gx)
    dx_scale = rstd * (g.abs() + g.abs().mean(-1, keepdim=True) + xhat_err * (g * xhat).abs().mean(-1, keepdim=True))
    if dres is not None:
        dx, dx_scale = dx + dres.double(), dx_scale + dres.double().abs()
    out["dx"] = (dx, dx_scale)
    out["dweight"] = ((dy64 * xhat).sum(0), (dy64.abs() * xhat_err).sum(0))
    out["dbias"] = (dy64.sum(0), dy64.abs().sum(0))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", D_MODELS)
def test_layer_norm_forward(cuda, dtype, cols):
    for rows, affine in ((37, "both"), (5, "weight"), (3, "none")):
        x, w, b = ln_inputs(rows, cols, dtype, affine, seed=cols)
        exact, scale = ln_exact(x, w, b)["y"]
        y = cuda.layer_norm(x, w, b, 1e-5)
        assert y.dtype == dtype
        assert_rounded_once(y, exact, scale, f"layer_norm forward {rows}x{cols} ({affine})")
        assert_rounded_once(
            cuda.layer_norm(misaligned(x), w, b, 1e-5),
            exact,
            scale,
            f"layer_norm forward misaligned {rows}x{cols} ({affine})",
        )


def check_layer_norm_grads(got: list, exact: dict, names: tuple[str, ...], what: str) -> None:
    """dx (and dweight, dbias where the op has them) against :func:`ln_exact`; the column sums of
    dweight/dbias get twice the fp32 allowance (thousands of terms, blocked sums)."""
    for name, g in zip(names, got):
        if g is None:
            assert name in ("dweight", "dbias"), f"{what}: no {name}"
            continue
        value, scale = exact["dx" if name in ("dx", "ddelta") else name]
        assert_rounded_once(g, value, scale, f"{what} {name}", terms=64 if name in ("dx", "ddelta") else 128)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", D_MODELS)
def test_layer_norm_backward_against_the_exact_gradients(cuda, dtype, cols):
    """The analytic backward (dx, dgamma, dbeta), per element against the float64 gradients."""
    for rows, affine in ((300, "both"), (7, "weight"), (4, "none")):
        x, w, b = ln_inputs(rows, cols, dtype, affine, seed=cols)
        dy = randn(rows, cols, dtype=dtype, seed=cols + 7)
        got = grads_of(lambda x_, w_, b_: cuda.layer_norm(x_, w_, b_, 1e-5), [x, w, b], dy)
        assert (got[1] is None) == (w is None) and (got[2] is None) == (b is None)
        check_layer_norm_grads(
            got, ln_exact(x, w, b, dy), ("dx", "dweight", "dbias"), f"layer_norm {rows}x{cols} ({affine})"
        )


def add_layer_norm_case(cuda, rows, cols, dtype, seed):
    x, w, b = ln_inputs(rows, cols, dtype, "both", seed=seed)
    delta = randn(rows, cols, dtype=dtype, seed=seed + 3)
    gs, gy = randn(rows, cols, dtype=dtype, seed=seed + 4), randn(rows, cols, dtype=dtype, seed=seed + 5)
    summed, normed = cuda.add_layer_norm(x, delta, w, b, 1e-5)
    assert torch.equal(summed, x + delta)  # one rounding of the fp32 sum, like eager
    exact = ln_exact(summed, w, b, gy, dres=gs)  # the kernel normalises the stored (rounded) sum
    assert_rounded_once(normed, *exact["y"], f"add_layer_norm forward {rows}x{cols}")
    got = grads_of(lambda *t: cuda.add_layer_norm(*t, 1e-5), [x, delta, w, b], (gs, gy))
    check_layer_norm_grads(got, exact, ("dx", "ddelta", "dweight", "dbias"), f"add_layer_norm {rows}x{cols}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [64, 127, 768, 4096])
def test_add_layer_norm_forward_and_backward(cuda, dtype, cols):
    add_layer_norm_case(cuda, 65, cols, dtype, seed=cols)


def backward_grid(rows: int, cols: int, dtype: torch.dtype) -> int:
    """Blocks of the LayerNorm backward on this GPU (from the workspace it asks for: 2 x grid x cols)."""
    lib, sms = _lib.device_context(torch.cuda.current_device())
    return int(lib.layer_norm_bwd_workspace(rows, cols, _lib.DTYPE_CODES[dtype], sms)) // (2 * cols)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [False, True], ids=["layer_norm", "add_layer_norm"])
def test_dgamma_dbeta_over_many_row_groups_per_block(cuda, dtype, fused):
    """d = 768 with about 20,000 rows (ANDREA-120M's width, a training batch's rows): every block of the
    backward visits many row groups, so the per-block accumulation and the cross-block reduce of
    dgamma/dbeta both carry real sums (a test with rows ~ grid would not notice either being wrong)."""
    rows, cols = 20_003, 768
    assert backward_grid(rows, cols, dtype) * 8 < rows, "the test must give each block several row groups"
    if fused:
        add_layer_norm_case(cuda, rows, cols, dtype, seed=11)
        return
    x, w, b = ln_inputs(rows, cols, dtype, "both", seed=11)
    dy = randn(rows, cols, dtype=dtype, seed=12)
    got = grads_of(lambda x_, w_, b_: cuda.layer_norm(x_, w_, b_, 1e-5), [x, w, b], dy)
    check_layer_norm_grads(got, ln_exact(x, w, b, dy), ("dx", "dweight", "dbias"), f"layer_norm {rows}x{cols}")


def test_layer_norm_from_several_host_threads_at_widths_needing_opt_in_shared_memory(cuda):
    """Widths whose backward needs more than 48 KiB of shared memory, launched from four host threads at
    once (the opt-in limit is raised once per kernel and device, not per call with each call's size)."""
    cases = [(cols, ln_inputs(64, cols, torch.float32, "both", seed=cols)) for cols in (6400, 7168, 8192, 7000)]
    expected = {cols: ln_exact(x, w, b, torch.ones_like(x)) for cols, (x, w, b) in cases}
    errors: list[BaseException] = []

    def work(cols, x, w, b):
        try:
            for _ in range(20):
                got = grads_of(lambda *t: cuda.layer_norm(*t, 1e-5), [x, w, b], torch.ones_like(x))
            torch.cuda.current_stream().synchronize()
            check_layer_norm_grads(got, expected[cols], ("dx", "dweight", "dbias"), f"thread, cols {cols}")
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(cols, *t)) for cols, t in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_layer_norm_backward_is_deterministic(cuda):
    x, w, b = ln_inputs(4096, 768, torch.float32, "both")
    dy = randn(4096, 768, seed=9)
    first = grads_of(lambda *t: cuda.layer_norm(*t, 1e-5), [x, w, b], dy)
    for _ in range(3):
        again = grads_of(lambda *t: cuda.layer_norm(*t, 1e-5), [x, w, b], dy)
        assert all(torch.equal(a, g) for a, g in zip(first, again))


def test_cuda_tensors_go_through_the_kernels(cuda, monkeypatch):
    calls = []
    for name in (
        "gelu_tanh_forward",
        "relu_forward",
        "swiglu_forward",
        "layer_norm_forward",
        "rms_norm_forward",
        "gelu_tanh_backward",
        "relu_backward",
        "swiglu_backward",
        "layer_norm_backward",
        "rms_norm_backward",
    ):
        original = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _n=name, _f=original, **k: calls.append(_n) or _f(*a, **k))
    x = randn(4, 256).requires_grad_()
    w = torch.ones(256, device="cuda", requires_grad=True)
    h = randn(4, 512).requires_grad_()
    loss = (
        cuda.gelu_tanh(x).sum()
        + cuda.relu(x).sum()
        + cuda.swiglu(*h.chunk(2, -1)).sum()
        + cuda.layer_norm(x, w, None, 1e-5).square().sum()
        + cuda.add_layer_norm(x, x, w, None, 1e-5)[1].sum()
        + cuda.rms_norm(x, w, 1e-5).square().sum()
    )
    loss.backward()
    assert sorted(set(calls)) == sorted(
        {
            "gelu_tanh_forward",
            "relu_forward",
            "swiglu_forward",
            "layer_norm_forward",
            "rms_norm_forward",
            "gelu_tanh_backward",
            "relu_backward",
            "swiglu_backward",
            "layer_norm_backward",
            "rms_norm_backward",
        }
    )


def test_autocast_layer_norm_runs_in_fp32_like_pytorch(cuda):
    x, w, b = ln_inputs(16, 768, torch.bfloat16, "both")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours = cuda.layer_norm(x, w.float(), b.float(), 1e-5)
        theirs = TorchBackend().layer_norm(x, w.float(), b.float(), 1e-5)
    assert ours.dtype == theirs.dtype == torch.float32
    assert_near(ours, theirs, torch.float32, "layer_norm under autocast")


# -- RMSNorm -------------------------------------------------------------------------------------------
#: Odd widths (scalar path: cols not a multiple of the vector width) next to the model's.
RMS_WIDTHS = [1, 7, 64, 127, 128, 333, 768, 1000, 4095, 8192]


def rms_exact(x, w, dy=None, eps=1e-5) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{output: (exact float64 value, scale of its terms)} of RMSNorm of the rows of ``x`` (already
    rounded inputs), and with ``dy`` of its backward (dx, dweight)."""
    x64 = x.double()
    w64 = w.double() if w is not None else torch.ones(x.shape[-1], dtype=torch.float64, device=x.device)
    rstd = (x64.square().mean(-1, keepdim=True) + eps).rsqrt()
    xhat = x64 * rstd
    out = {"y": (xhat * w64, xhat.abs() * w64.abs())}
    if dy is None:
        return out
    g = dy.double() * w64
    gx = (g * xhat).mean(-1, keepdim=True)
    out["dx"] = (rstd * (g - xhat * gx), rstd * (g.abs() + xhat.abs() * (g * xhat).abs().mean(-1, keepdim=True)))
    out["dweight"] = ((dy.double() * xhat).sum(0), (dy.double().abs() * xhat.abs()).sum(0))
    return out


def rms_inputs(rows, cols, dtype, affine, seed=0):
    x = randn(rows, cols, dtype=dtype, scale=3.0, shift=1.5, seed=seed)
    w = randn(cols, dtype=dtype, scale=0.2, shift=1.0, seed=seed + 1) if affine else None
    return x, w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", RMS_WIDTHS)
def test_rms_norm_forward(cuda, dtype, cols):
    for rows, affine in ((37, True), (3, False)):
        x, w = rms_inputs(rows, cols, dtype, affine, seed=cols)
        exact, scale = rms_exact(x, w)["y"]
        for variant, xin in (("aligned", x), ("misaligned", misaligned(x))):
            y = cuda.rms_norm(xin, w, 1e-5)
            assert y.dtype == dtype and y.shape == x.shape
            assert_rounded_once(y, exact, scale, f"rms_norm forward {variant} {rows}x{cols} (weight {affine})")
        # and against PyTorch's own (which rounds its fp32 result once too)
        assert_near(cuda.rms_norm(x, w, 1e-5), F.rms_norm(x, (cols,), w, 1e-5), dtype, f"rms_norm vs F {cols}", k=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", RMS_WIDTHS)
def test_rms_norm_backward_against_the_exact_gradients_and_autograd(cuda, dtype, cols):
    for rows, affine in ((300, True), (5, False)):
        x, w = rms_inputs(rows, cols, dtype, affine, seed=cols)
        dy = randn(rows, cols, dtype=dtype, seed=cols + 7)
        exact = rms_exact(x, w, dy)
        got = grads_of(lambda x_, w_: cuda.rms_norm(x_, w_, 1e-5), [x, w], dy)
        assert (got[1] is None) == (w is None)
        check_layer_norm_grads(got, exact, ("dx", "dweight"), f"rms_norm {rows}x{cols} (weight {affine})")
        ref = grads_of(lambda x_, w_: F.rms_norm(x_, (cols,), w_, 1e-5), [x, w], dy)
        for name, a, b in zip(("dx", "dweight"), got, ref):
            if b is not None:
                assert_near(a, b, dtype, f"rms_norm {name} vs autograd of F.rms_norm, {rows}x{cols}", k=4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_dweight_over_many_row_groups_per_block(cuda, dtype):
    rows, cols = 20_003, 768
    assert backward_grid(rows, cols, dtype) * 8 < rows, "the test must give each block several row groups"
    x, w = rms_inputs(rows, cols, dtype, True, seed=11)
    dy = randn(rows, cols, dtype=dtype, seed=12)
    got = grads_of(lambda x_, w_: cuda.rms_norm(x_, w_, 1e-5), [x, w], dy)
    check_layer_norm_grads(got, rms_exact(x, w, dy), ("dx", "dweight"), f"rms_norm {rows}x{cols}")


def test_rms_norm_backward_is_deterministic(cuda):
    x, w = rms_inputs(4096, 768, torch.float32, True)
    dy = randn(4096, 768, seed=9)
    first = grads_of(lambda *t: cuda.rms_norm(*t, 1e-5), [x, w], dy)
    for _ in range(3):
        again = grads_of(lambda *t: cuda.rms_norm(*t, 1e-5), [x, w], dy)
        assert all(torch.equal(a, g) for a, g in zip(first, again))


@pytest.mark.parametrize("cols", [ops.MAX_RMS_NORM_COLS, ops.MAX_RMS_NORM_COLS + 1, 3 * ops.MAX_RMS_NORM_COLS])
def test_rms_norm_above_the_kernel_limit_falls_back_to_eager(cuda, monkeypatch, cols):
    calls = []
    for name in ("rms_norm_forward", "rms_norm_backward"):
        original = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _n=name, _f=original: calls.append(_n) or _f(*a))
    x, w = rms_inputs(4, cols, torch.float32, True, seed=3)
    dy = randn(4, cols, seed=4)
    got = grads_of(lambda *t: cuda.rms_norm(*t, 1e-5), [x, w], dy)
    y = cuda.rms_norm(x, w, 1e-5)
    assert calls == (
        [] if cols > ops.MAX_RMS_NORM_COLS else ["rms_norm_forward", "rms_norm_backward", "rms_norm_forward"]
    )
    exact = rms_exact(x, w, dy)
    assert_rounded_once(y, *exact["y"], f"rms_norm forward at {cols}")
    check_layer_norm_grads(got, exact, ("dx", "dweight"), f"rms_norm at {cols}")


def test_autocast_rms_norm_follows_pytorchs_policy(cuda):
    x, w = rms_inputs(16, 768, torch.float32, True)
    for xin, win in ((x, w), (x.bfloat16(), w.bfloat16())):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ours = cuda.rms_norm(xin, win, 1e-5)
            theirs = TorchBackend().rms_norm(xin, win, 1e-5)
        assert ours.dtype == theirs.dtype, (xin.dtype, win.dtype)
        assert_near(ours, theirs, theirs.dtype, f"rms_norm under autocast ({xin.dtype}, {win.dtype})")


# -- CUDA graphs, torch.compile ----------------------------------------------------------------------
def block_like(cuda: CudaBackend, x, w, b):
    """LayerNorm -> RMSNorm -> GELU -> SwiGLU -> fused add + LayerNorm: every kernel, forward and backward."""
    h = cuda.gelu_tanh(cuda.rms_norm(cuda.layer_norm(x, w, b, 1e-5), w, 1e-5))
    out = cuda.swiglu(*h.chunk(2, -1))
    return cuda.add_layer_norm(out, out, None, None, 1e-5)[1]


def test_forward_and_backward_replay_from_a_cuda_graph(cuda, fresh_availability):
    """Capture forward + backward of every op into a CUDA graph and replay it on new inputs. The
    availability check (whose probe once synchronised the current stream) first runs during the
    capture here: it must neither break the capture nor be captured."""
    x, w, b = ln_inputs(64, 512, torch.float32, "both")
    x.requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch's graph docs ask
        for _ in range(3):
            torch.autograd.grad(block_like(cuda, x, w, b).sum(), (x,))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert CudaBackend.availability(), "the probe inside a capture"
        out = block_like(cuda, x, w, b)
        (gx,) = torch.autograd.grad(out.sum(), (x,))
    new_x = randn(64, 512, scale=3.0, seed=5)
    with torch.no_grad():
        x.copy_(new_x)
    graph.replay()
    torch.cuda.synchronize()
    x_eager = new_x.clone().requires_grad_()
    out_eager = block_like(cuda, x_eager, w, b)
    (gx_eager,) = torch.autograd.grad(out_eager.sum(), (x_eager,))
    assert torch.equal(out, out_eager) and torch.equal(gx, gx_eager)


def test_torch_compile_keeps_the_kernels(cuda, monkeypatch):
    """Under torch.compile the ops are opaque custom operators that launch the kernels (not the eager
    reference that the compiler would trace and fuse), forward and backward."""
    calls = []
    for name in (
        "gelu_tanh_forward",
        "gelu_tanh_backward",
        "swiglu_forward",
        "swiglu_backward",
        "layer_norm_forward",
        "layer_norm_backward",
        "rms_norm_forward",
        "rms_norm_backward",
    ):
        original = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _n=name, _f=original: calls.append(_n) or _f(*a))
    x, w, b = ln_inputs(64, 512, torch.bfloat16, "both")
    x.requires_grad_()
    compiled = torch.compile(lambda *t: block_like(cuda, *t), fullgraph=True)
    out = compiled(x, w, b)
    (gx,) = torch.autograd.grad(out.float().sum(), (x,))
    assert {
        "gelu_tanh_forward",
        "gelu_tanh_backward",
        "swiglu_forward",
        "swiglu_backward",
        "layer_norm_forward",
        "layer_norm_backward",
        "rms_norm_forward",
        "rms_norm_backward",
    } <= set(calls)
    x_eager = x.detach().clone().requires_grad_()
    out_eager = block_like(cuda, x_eager, w, b)
    (gx_eager,) = torch.autograd.grad(out_eager.float().sum(), (x_eager,))
    assert_near(out, out_eager, torch.bfloat16, "compiled vs eager forward")
    assert_near(gx, gx_eager, torch.bfloat16, "compiled vs eager backward", k=2)


# -- training ------------------------------------------------------------------------------------------
def train(
    kernel_backend: str,
    placement: str,
    activation: str,
    steps: int = 50,
    seed: int = 0,
    precision: str = "fp32",
    norm: str = "layernorm",
) -> list[float]:
    """``steps`` plain AdamW steps of andrea-tiny on a learnable token pattern; the losses.

    ``precision``: "fp32"; "bf16" (weights and activations in bf16: every kernel runs in bf16, end to
    end); "bf16-autocast" (fp32 weights under bf16 autocast, as Lightning's bf16-mixed trains).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(seed)
    extra = {"norm": norm, "qk_norm": True} if norm != "layernorm" else {}  # rmsnorm: every norm, QK too
    config = plugin.preset(
        "andrea-tiny", kernel_backend=kernel_backend, norm_placement=placement, activation=activation, **extra
    )
    model = plugin.Andrea(config).to("cuda")  # built on the CPU, then moved: as Lightning does
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    g = torch.Generator().manual_seed(seed + 1)
    starts = torch.randint(0, 1000, (steps, 8, 1), generator=g)
    strides = torch.randint(1, 7, (steps, 8, 1), generator=g)
    tokens = ((starts + strides * torch.arange(65)) % 1000).cuda()  # arithmetic sequences: learnable
    losses = []
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16-autocast")
    with sdpa_kernel(SDPBackend.MATH):  # a deterministic attention backward
        for step in range(steps):
            with autocast:
                _, loss = model(tokens[step, :, :-1], tokens[step, :, 1:])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "bf16-autocast"])
@pytest.mark.parametrize("placement,activation", [("pre", "gelu"), ("post", "swiglu")])
def test_bf16_training_end_to_end_follows_the_torch_backend(cuda, placement, activation, precision):
    ours = train("cuda", placement, activation, steps=30, precision=precision)
    reference = train("torch", placement, activation, steps=30, precision=precision)
    assert all(math.isfinite(v) for v in ours)
    assert ours[-1] < ours[0] - 0.5 and reference[-1] < reference[0] - 0.5, "both runs must learn"
    mean_diff = sum(abs(a - b) for a, b in zip(ours, reference)) / len(ours)
    assert mean_diff <= BF16_TRAIN_LOSS_ATOL, f"mean |loss difference| {mean_diff:.3g} (allowed {BF16_TRAIN_LOSS_ATOL})"


@pytest.mark.slow
@pytest.mark.parametrize(
    "placement,activation,norm",
    [
        ("pre", "gelu", "layernorm"),
        ("post", "swiglu", "layernorm"),
        ("pre", "relu", "layernorm"),
        ("post", "swiglu", "rmsnorm"),
    ],
)  # every norm RMS, QK too
def test_fifty_training_steps_match_the_torch_backend(cuda, placement, activation, norm):
    ours = train("cuda", placement, activation, norm=norm)
    reference = train("torch", placement, activation, norm=norm)
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
    assert (
        bench.main(
            ["--min-log2", "16", "--max-log2", "18", "--reps", "3", "--warmup", "1", "--no-compile", "--json", str(out)]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert data["copy_peak_gbps"] > 0
    ops_seen = {(r["op"], r["impl"]) for r in data["results"]}
    assert {(op, impl) for op in bench.OPS for impl in ("cuda", "eager")} <= ops_seen
    assert all(r["gbps"] > 0 for r in data["results"])
