"""CPU checks of the backend: discovery, availability messages, eager fallbacks, and the Python
wrapper logic of every op (run against an emulation of the launchers, see FakeLibrary)."""

from __future__ import annotations

import ctypes
import re
from importlib import metadata

import pytest
import torch
import torch.nn.functional as F

import andrea_lab.plugin as plugin
from andrea_lab.plugin import KernelBackend, TorchBackend, list_plugins, resolve
from andrea_lab_cuda import CudaBackend, _lib, backend, build, custom_ops, ops

no_gpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour on a machine without a GPU")


# -- discovery ---------------------------------------------------------------------------------------
def test_cuda_is_registered_in_the_kernel_backend_group():
    eps = [ep for ep in metadata.entry_points(group="andrea_lab.kernel_backend") if ep.name == "cuda"]
    assert len(eps) == 1, "pip install -e plugins/andrea-lab-cuda registers exactly one 'cuda'"
    assert eps[0].value == "andrea_lab_cuda.backend:CudaBackend"
    assert eps[0].dist is not None and eps[0].dist.name == "andrea-lab-cuda"
    assert resolve("kernel_backend", "cuda") is CudaBackend
    assert resolve("kernel_backend", "andrea-lab-cuda:cuda") is CudaBackend
    info = next(p for p in list_plugins("kernel_backend") if p.name == "cuda")
    assert info.error is None and "CUDA kernels" in info.description
    assert issubclass(CudaBackend, KernelBackend)


def test_every_backend_op_has_a_kernel_so_the_listing_shows_no_eager_fallback(fresh_availability, monkeypatch):
    from andrea_lab.plugin import Availability, eager_fallbacks

    assert eager_fallbacks(CudaBackend) == []
    monkeypatch.setattr(backend, "availability", lambda: Availability(True, "pretend"))
    (info,) = [i for i in list_plugins("kernel_backend") if i.name == "cuda"]
    assert info.eager_fallback == () and not info.unavailable
    assert "RMSNorm" in info.description


def test_the_listing_would_name_rms_norm_if_the_kernel_were_missing(monkeypatch):
    """The guard above can fail: without its rms_norm override the backend is listed as falling back (what
    `andrea plugins` prints from ``eager_fallback``: tests/commands/test_plugins.py)."""
    monkeypatch.setattr(CudaBackend, "rms_norm", KernelBackend.rms_norm)
    (info,) = [i for i in list_plugins("kernel_backend", availability=False) if i.name == "cuda"]
    assert info.eager_fallback == ("rms_norm",)


def test_c_and_python_agree_on_dtype_codes_abi_and_limits():
    common = (build.SOURCES_DIR / "common.cuh").read_text()
    enum = dict(re.findall(r"(k\w+) = (\d+)", re.search(r"enum DType : int \{([^}]*)\}", common).group(1)))
    assert {"kFloat32": "0", "kFloat16": "1", "kBFloat16": "2"} == enum
    assert _lib.DTYPE_CODES == {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    runtime = (build.SOURCES_DIR / "runtime.cu").read_text()
    assert f"#define ANDREA_CUDA_ABI_VERSION {_lib.ABI_VERSION}\n" in runtime
    norm = (build.SOURCES_DIR / "norm.cuh").read_text()  # the one width limit of LayerNorm and RMSNorm
    assert f"constexpr int64_t kMaxCols = {ops.MAX_LAYER_NORM_COLS};" in norm
    assert ops.MAX_RMS_NORM_COLS == ops.MAX_LAYER_NORM_COLS
    for launchers in ("layer_norm.cu", "rms_norm.cu"):
        assert '#include "norm.cuh"' in (build.SOURCES_DIR / launchers).read_text()


# -- availability --------------------------------------------------------------------------------------
@no_gpu_only
def test_unavailable_without_a_gpu_saying_so(fresh_availability):
    avail = CudaBackend.availability()
    assert not avail
    assert avail.reason.startswith("no CUDA device: ")
    assert "torch.cuda.is_available() is False" in avail.reason
    assert "kernel_backend 'torch'" in avail.reason


@no_gpu_only
def test_selecting_cuda_without_a_gpu_is_a_clear_error_not_a_traceback(fresh_availability):
    with pytest.raises(RuntimeError) as info:
        plugin.Andrea(plugin.preset("andrea-micro", kernel_backend="cuda"))
    message = str(info.value)
    assert message.startswith("kernel backend 'cuda' is not available here: no CUDA device: ")
    assert "\n" not in message


def test_availability_is_cached(fresh_availability, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: calls.append(1) or False)
    first = CudaBackend.availability()
    assert CudaBackend.availability() is first
    assert len(calls) == 1


def test_unavailable_without_nvcc_saying_so(fresh_availability, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    avail = CudaBackend.availability()
    assert not avail
    assert avail.reason.startswith("no nvcc: the CUDA compiler is neither on PATH nor in $CUDA_HOME/bin")
    assert "CUDA_HOME is not set" in avail.reason


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found: cannot run a failing build")
def test_unavailable_after_a_build_error_naming_the_log(fresh_availability, monkeypatch, tmp_path):
    broken = tmp_path / "csrc"
    broken.mkdir()
    (broken / "kernels.cu").write_text("__global__ void k() { undefined_function(); }\n")
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "SOURCES_DIR", broken)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(_lib, "device_arch", lambda device: 80)
    avail = CudaBackend.availability()
    assert not avail
    assert avail.reason.startswith("building the CUDA kernels with ")
    assert "compiling kernels.cu failed" in avail.reason and "undefined_function" in avail.reason
    log = avail.reason.rsplit("build log: ", 1)[1]
    assert log.startswith(str(tmp_path / "cache" / "cuda")) and "undefined_function" in open(log).read()


# -- eager fallbacks (CPU tensors: the model is built on the CPU, then moved) --------------------------
def _pair(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g, dtype=torch.float32).to(dtype).requires_grad_()
    b = a.detach().clone().requires_grad_()
    return a, b


@pytest.mark.parametrize("op", ["gelu_tanh", "relu", "swiglu", "layer_norm", "add_layer_norm", "rms_norm"])
def test_cpu_tensors_fall_back_to_the_eager_reference(op):
    cuda, ref = CudaBackend(), TorchBackend()
    x1, x2 = _pair((2, 5, 16))
    d1, d2 = _pair((2, 5, 16), seed=1)
    w1, w2 = _pair((16,), seed=2)
    b1, b2 = _pair((16,), seed=3)
    if op in ("gelu_tanh", "relu"):
        out1, out2 = getattr(cuda, op)(x1), getattr(ref, op)(x2)
    elif op == "swiglu":
        out1, out2 = cuda.swiglu(*x1.chunk(2, -1)), ref.swiglu(*x2.chunk(2, -1))
    elif op == "layer_norm":
        out1, out2 = cuda.layer_norm(x1, w1, b1, 1e-5), ref.layer_norm(x2, w2, b2, 1e-5)
    elif op == "rms_norm":
        out1, out2 = cuda.rms_norm(x1, w1, 1e-5) + 0 * b1.sum(), ref.rms_norm(x2, w2, 1e-5) + 0 * b2.sum()
    else:
        out1 = torch.cat(cuda.add_layer_norm(x1, d1, w1, b1, 1e-5))
        out2 = torch.cat(ref.add_layer_norm(x2, d2, w2, b2, 1e-5))
    assert torch.equal(out1, out2)
    out1.square().sum().backward()
    out2.square().sum().backward()
    for a, b in ((x1, x2), (d1, d2), (w1, w2), (b1, b2)):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad)


def test_a_cuda_model_builds_on_the_cpu_and_matches_the_torch_backend_there(fresh_availability, monkeypatch):
    """Lightning builds the model on the CPU, then moves it: construction must not need a GPU."""
    from andrea_lab.plugin import Availability

    monkeypatch.setattr(backend, "availability", lambda: Availability(True, "pretend"))
    losses = {}
    for name in ("cuda", "torch"):
        for placement, activation in (("pre", "gelu"), ("post", "swiglu")):
            torch.manual_seed(0)
            model = plugin.Andrea(
                plugin.preset("andrea-micro", kernel_backend=name, norm_placement=placement, activation=activation)
            )
            idx = torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(1))
            _, loss = model(idx, idx)
            loss.backward()
            losses[name, placement] = (loss.item(), model.token_embed.weight.grad.norm().item())
    for placement in ("pre", "post"):
        assert losses["cuda", placement] == losses["torch", placement]


# -- the wrapper logic of every op, against an emulation of the launchers -----------------------------
_DTYPES = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}


def _mem(ptr: int | None, numel: int, dtype: torch.dtype) -> torch.Tensor | None:
    """The ``numel`` elements at address ``ptr`` as a tensor sharing that memory."""
    if ptr is None:
        return None
    size = numel * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_char * size).from_address(ptr), dtype=dtype, count=numel)


def _rows(ptr: int, rows: int, cols: int, ld: int, dtype: torch.dtype) -> torch.Tensor:
    return _mem(ptr, (rows - 1) * ld + cols, dtype).as_strided((rows, cols), (ld, 1))


class FakeLibrary:
    """Each launcher's documented contract, implemented with eager PyTorch on the memory behind the
    pointers it is given: running the autograd functions against it checks, on the CPU, every
    pointer, size, stride, dtype code and workspace the Python side passes to the real kernels."""

    def __init__(self):
        self.calls: list[tuple] = []

    def check(self, code, op):
        assert code == 0, f"{op}: the fake launcher rejected its arguments"

    def gelu_tanh_fwd(self, x, y, n, dtype, sms, stream):
        self.calls.append(("gelu_tanh_fwd", n, dtype))
        d = _DTYPES[dtype]
        _mem(y, n, d).copy_(F.gelu(_mem(x, n, d).float(), approximate="tanh"))
        return 0

    def gelu_tanh_bwd(self, dy, x, dx, n, dtype, sms, stream):
        self.calls.append(("gelu_tanh_bwd", n, dtype))
        d = _DTYPES[dtype]
        # Formulas, not autograd: a custom operator's implementation runs below the autograd layer.
        g = torch.ops.aten.gelu_backward(_mem(dy, n, d).float(), _mem(x, n, d).float(), approximate="tanh")
        _mem(dx, n, d).copy_(g)
        return 0

    def relu_fwd(self, x, y, n, dtype, sms, stream):
        self.calls.append(("relu_fwd", n, dtype))
        d = _DTYPES[dtype]
        _mem(y, n, d).copy_(F.relu(_mem(x, n, d)))
        return 0

    def relu_bwd(self, dy, y, dx, n, dtype, sms, stream):
        self.calls.append(("relu_bwd", n, dtype))
        d = _DTYPES[dtype]
        yv, dyv = _mem(y, n, d), _mem(dy, n, d)
        _mem(dx, n, d).copy_(torch.where(yv <= 0, torch.zeros_like(dyv), dyv))
        return 0

    def swiglu_fwd(self, gate, ld_gate, up, ld_up, out, rows, cols, dtype, sms, stream):
        self.calls.append(("swiglu_fwd", rows, cols, ld_gate, ld_up, dtype))
        d = _DTYPES[dtype]
        g, u = _rows(gate, rows, cols, ld_gate, d).float(), _rows(up, rows, cols, ld_up, d).float()
        _mem(out, rows * cols, d).view(rows, cols).copy_(F.silu(g) * u)
        return 0

    def swiglu_bwd(self, dout, gate, ld_gate, up, ld_up, dgate, dup, rows, cols, dtype, sms, stream):
        self.calls.append(("swiglu_bwd", rows, cols, ld_gate, ld_up, dtype))
        d = _DTYPES[dtype]
        g = _rows(gate, rows, cols, ld_gate, d).float()
        u = _rows(up, rows, cols, ld_up, d).float()
        do = _mem(dout, rows * cols, d).view(rows, cols).float()
        s = torch.sigmoid(g)
        _mem(dgate, rows * cols, d).view(rows, cols).copy_(do * u * s * (1 + g * (1 - s)))
        _mem(dup, rows * cols, d).view(rows, cols).copy_(do * g * s)
        return 0

    def layer_norm_bwd_workspace(self, rows, cols, dtype, sms):
        return 2 * min(rows, sms) * cols

    def layer_norm_fwd(self, x, delta, sum_out, w, b, y, mean, rstd, rows, cols, eps, dtype, wdtype, stream):
        self.calls.append(("layer_norm_fwd", rows, cols, delta is not None, w is not None, b is not None, dtype))
        assert wdtype == dtype and (delta is None) == (sum_out is None)
        d = _DTYPES[dtype]
        xv = _mem(x, rows * cols, d).view(rows, cols).float()
        if delta is not None:
            s = (xv + _mem(delta, rows * cols, d).view(rows, cols).float()).to(d)
            _mem(sum_out, rows * cols, d).copy_(s.view(-1))
            xv = s.float()
        mu = xv.mean(-1)
        rs = torch.rsqrt(xv.var(-1, unbiased=False) + eps)
        out = (xv - mu[:, None]) * rs[:, None]
        if w is not None:
            out = out * _mem(w, cols, d).float()
        if b is not None:
            out = out + _mem(b, cols, d).float()
        _mem(y, rows * cols, d).copy_(out.view(-1))
        _mem(mean, rows, torch.float32).copy_(mu)
        _mem(rstd, rows, torch.float32).copy_(rs)
        return 0

    def layer_norm_bwd(
        self,
        dy,
        x,
        mean,
        rstd,
        w,
        dres,
        dx,
        dw,
        db,
        workspace,
        workspace_floats,
        rows,
        cols,
        dtype,
        wdtype,
        sms,
        stream,
    ):
        self.calls.append(
            ("layer_norm_bwd", rows, cols, w is not None, dres is not None, dw is not None, db is not None, dtype)
        )
        assert wdtype == dtype
        if dw is not None or db is not None:  # the same check as the real launcher
            assert workspace is not None and workspace_floats >= self.layer_norm_bwd_workspace(rows, cols, dtype, sms)
        d = _DTYPES[dtype]
        xv = _mem(x, rows * cols, d).view(rows, cols).float()
        dyv = _mem(dy, rows * cols, d).view(rows, cols).float()
        mu = _mem(mean, rows, torch.float32)[:, None]
        rs = _mem(rstd, rows, torch.float32)[:, None]
        xhat = (xv - mu) * rs
        g = dyv * (_mem(w, cols, d).float() if w is not None else 1.0)
        out = rs * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        if dres is not None:
            out = out + _mem(dres, rows * cols, d).view(rows, cols).float()
        _mem(dx, rows * cols, d).copy_(out.view(-1))
        if dw is not None:
            _mem(dw, cols, d).copy_((dyv * xhat).sum(0))
        if db is not None:
            _mem(db, cols, d).copy_(dyv.sum(0))
        return 0

    def rms_norm_bwd_workspace(self, rows, cols, dtype, sms):
        return min(rows, sms) * cols

    def rms_norm_fwd(self, x, w, y, rstd, rows, cols, eps, dtype, wdtype, stream):
        self.calls.append(("rms_norm_fwd", rows, cols, w is not None, dtype))
        assert wdtype == dtype
        d = _DTYPES[dtype]
        xv = _mem(x, rows * cols, d).view(rows, cols).float()
        rs = torch.rsqrt(xv.square().mean(-1) + eps)
        out = xv * rs[:, None] * (_mem(w, cols, d).float() if w is not None else 1.0)
        _mem(y, rows * cols, d).copy_(out.view(-1))
        _mem(rstd, rows, torch.float32).copy_(rs)
        return 0

    def rms_norm_bwd(self, dy, x, rstd, w, dx, dw, workspace, workspace_floats, rows, cols, dtype, wdtype, sms, stream):
        self.calls.append(("rms_norm_bwd", rows, cols, w is not None, dw is not None, dtype))
        assert wdtype == dtype
        if dw is not None:
            assert workspace is not None and workspace_floats >= self.rms_norm_bwd_workspace(rows, cols, dtype, sms)
        d = _DTYPES[dtype]
        xhat = _mem(x, rows * cols, d).view(rows, cols).float() * _mem(rstd, rows, torch.float32)[:, None]
        dyv = _mem(dy, rows * cols, d).view(rows, cols).float()
        g = dyv * (_mem(w, cols, d).float() if w is not None else 1.0)
        out = _mem(rstd, rows, torch.float32)[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        _mem(dx, rows * cols, d).copy_(out.view(-1))
        if dw is not None:
            _mem(dw, cols, d).copy_((dyv * xhat).sum(0))
        return 0


@pytest.fixture
def fake(monkeypatch):
    lib = FakeLibrary()
    monkeypatch.setattr(ops, "_launch_context", lambda t: (lib, 4, 0))
    monkeypatch.setattr(custom_ops, "uses_kernels", lambda t: True)  # CPU tensors through the launch helpers
    return lib


TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def _grads(*tensors):
    return [t.grad if t is not None else None for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_function_wiring(fake, dtype):
    for affine in ("both", "weight", "none"):
        x1, x2 = _pair((3, 4, 24), dtype)
        w1, w2 = _pair((24,), dtype, seed=1) if affine != "none" else (None, None)
        b1, b2 = _pair((24,), dtype, seed=2) if affine == "both" else (None, None)
        y1 = custom_ops.layer_norm(x1, w1, b1, 1e-5)[0]
        y2 = F.layer_norm(x2, (24,), w2, b2, 1e-5)
        assert y1.shape == x1.shape and y1.dtype == dtype
        torch.testing.assert_close(y1, y2, **TOL[dtype])
        gy = torch.randn(y1.shape).to(dtype)
        y1.backward(gy)
        y2.backward(gy)
        for a, b in zip(_grads(x1, w1, b1), _grads(x2, w2, b2)):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, **TOL[dtype])
    assert ("layer_norm_bwd", 12, 24, False, False, False, False, _lib.DTYPE_CODES[dtype]) in fake.calls


def test_layer_norm_function_skips_parameter_grads_nobody_needs(fake):
    x = torch.randn(5, 8, requires_grad=True)
    w, b = torch.randn(8), torch.randn(8)  # frozen
    custom_ops.layer_norm(x, w, b, 1e-5)[0].sum().backward()
    assert fake.calls[-1] == ("layer_norm_bwd", 5, 8, True, False, False, False, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_function_wiring(fake, dtype):
    for affine in (True, False):
        x1, x2 = _pair((3, 4, 24), dtype)
        w1, w2 = _pair((24,), dtype, seed=1) if affine else (None, None)
        y1 = custom_ops.rms_norm(x1, w1, 1e-5)[0]
        y2 = F.rms_norm(x2, (24,), w2, 1e-5)
        assert y1.shape == x1.shape and y1.dtype == dtype
        torch.testing.assert_close(y1, y2, **TOL[dtype])
        gy = torch.randn(y1.shape).to(dtype)
        y1.backward(gy)
        y2.backward(gy)
        for a, b in zip(_grads(x1, w1), _grads(x2, w2)):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, **TOL[dtype])
    code = _lib.DTYPE_CODES[dtype]
    assert fake.calls == [
        ("rms_norm_fwd", 12, 24, True, code),
        ("rms_norm_bwd", 12, 24, True, True, code),
        ("rms_norm_fwd", 12, 24, False, code),
        ("rms_norm_bwd", 12, 24, False, False, code),
    ]


def test_rms_norm_function_skips_the_weight_grad_nobody_needs(fake):
    x = torch.randn(5, 8, requires_grad=True)
    custom_ops.rms_norm(x, torch.randn(8), 1e-5)[0].sum().backward()  # frozen weight
    assert fake.calls[-1] == ("rms_norm_bwd", 5, 8, True, False, 0)


def test_the_backend_sends_what_the_rms_kernel_cannot_take_to_eager(fake, monkeypatch):
    """Widths above the kernel's limit, a weight of another dtype, and (under autocast) anything but fp32
    never reach the launchers (here CPU tensors pose as CUDA ones, so the routing itself is checked)."""
    monkeypatch.setattr(backend, "_cuda_floats", lambda *t: True)
    cuda = CudaBackend()
    wide = torch.randn(2, ops.MAX_RMS_NORM_COLS + 1)
    torch.testing.assert_close(cuda.rms_norm(wide, None, 1e-5), F.rms_norm(wide, wide.shape[-1:], None, 1e-5))
    x = torch.randn(3, 16)
    cuda.rms_norm(x, torch.randn(16, dtype=torch.float64), 1e-5)
    assert fake.calls == []
    cuda.rms_norm(x, torch.randn(16), 1e-5)
    assert fake.calls == [("rms_norm_fwd", 3, 16, True, 0)]
    fake.calls.clear()
    monkeypatch.setattr(backend, "_autocast_enabled", lambda: True)
    cuda.rms_norm(x.bfloat16(), torch.randn(16).bfloat16(), 1e-5)
    assert fake.calls == []
    cuda.rms_norm(x, torch.randn(16), 1e-5)
    assert fake.calls == [("rms_norm_fwd", 3, 16, True, 0)]


@pytest.mark.parametrize("use", ["both", "sum", "normed"])
def test_add_layer_norm_function_wiring(fake, use):
    x1, x2 = _pair((2, 3, 16))
    d1, d2 = _pair((2, 3, 16), seed=1)
    w1, w2 = _pair((16,), seed=2)
    b1, b2 = _pair((16,), seed=3)
    s1, y1, _, _ = custom_ops.add_layer_norm(x1, d1, w1, b1, 1e-5)
    s2 = x2 + d2
    y2 = F.layer_norm(s2, (16,), w2, b2, 1e-5)
    torch.testing.assert_close(s1, s2)
    torch.testing.assert_close(y1, y2)
    k = torch.linspace(-1, 1, 96).view(2, 3, 16)
    loss1 = {
        "both": (s1 * k).sum() + (y1 * k.flip(-1)).square().sum(),
        "sum": (s1 * k).sum(),
        "normed": (y1 * k).square().sum(),
    }[use]
    loss2 = {
        "both": (s2 * k).sum() + (y2 * k.flip(-1)).square().sum(),
        "sum": (s2 * k).sum(),
        "normed": (y2 * k).square().sum(),
    }[use]
    loss1.backward()
    loss2.backward()
    for a, b in zip(_grads(x1, d1, w1, b1), _grads(x2, d2, w2, b2)):
        if use == "sum" and b is not None and not b.any():
            assert a is None or not a.any()  # the parameters get no gradient from the sum alone
            continue
        torch.testing.assert_close(a, b)
    if use != "sum":
        assert fake.calls[-1][0] == "layer_norm_bwd" and fake.calls[-1][4] == (use == "both")  # dres fused


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_function_reads_chunked_halves_in_place(fake, dtype):
    h1, h2 = _pair((2, 5, 2 * 40), dtype)
    out1 = custom_ops.swiglu(*h1.chunk(2, -1))
    gate, up = h2.chunk(2, -1)
    out2 = F.silu(gate.float()) * up.float()
    torch.testing.assert_close(out1.float(), out2, **TOL[dtype])
    assert fake.calls[-1] == ("swiglu_fwd", 10, 40, 80, 80, _lib.DTYPE_CODES[dtype])  # row stride 2*cols: no copy
    g = torch.randn(out1.shape).to(dtype)
    out1.backward(g)
    out2.backward(g.float())
    torch.testing.assert_close(h1.grad.float(), h2.grad.float(), **TOL[dtype])


def test_swiglu_function_on_contiguous_and_transposed_inputs(fake):
    g1, g2 = _pair((6, 9))
    u1, u2 = _pair((6, 9), seed=1)
    out1 = custom_ops.swiglu(g1, u1.t().contiguous().t())  # column-major: copied to rows
    assert fake.calls[-1] == ("swiglu_fwd", 6, 9, 9, 9, 0)
    out2 = F.silu(g2) * u2
    torch.testing.assert_close(out1, out2)
    out1.sum().backward()
    out2.sum().backward()
    torch.testing.assert_close(g1.grad, g2.grad)
    torch.testing.assert_close(u1.grad, u2.grad)


@pytest.mark.parametrize("name", ["gelu", "relu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_elementwise_function_wiring(fake, name, dtype):
    fn, ref = {
        "gelu": (custom_ops.gelu_tanh, lambda t: F.gelu(t, approximate="tanh")),
        "relu": (custom_ops.relu, F.relu),
    }[name]
    x1, x2 = _pair((7, 13), dtype)
    y1, y2 = fn(x1), ref(x2)
    torch.testing.assert_close(y1, y2, **TOL[dtype])
    g = torch.randn(y1.shape).to(dtype)
    y1.backward(g)
    y2.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, **TOL[dtype])
    assert [c[0] for c in fake.calls] == [
        f"{name}_tanh_fwd" if name == "gelu" else "relu_fwd",
        f"{name}_tanh_bwd" if name == "gelu" else "relu_bwd",
    ]
    assert fake.calls[0][1:] == (91, _lib.DTYPE_CODES[dtype])


def test_a_compiled_graph_calls_the_launchers_not_a_traced_reference(fake):
    """The operators are opaque to torch.compile: the compiled function calls the launchers at run time
    (here the emulation, since ``fake`` routes CPU tensors to them as CUDA tensors are), forward and
    backward, with no graph break (fullgraph)."""

    def f(x, w, h):
        y = custom_ops.gelu_tanh(custom_ops.rms_norm(custom_ops.layer_norm(x, w, None, 1e-5)[0], w, 1e-5)[0])
        return y.sum() + custom_ops.swiglu(*h.chunk(2, -1)).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    x, w, h = _pair((4, 8))[0], _pair((8,), seed=1)[0], _pair((4, 16), seed=2)[0]
    loss = compiled(x, w, h)
    loss.backward()
    assert sorted(c[0] for c in fake.calls) == sorted(
        [
            "layer_norm_fwd",
            "rms_norm_fwd",
            "gelu_tanh_fwd",
            "swiglu_fwd",
            "swiglu_bwd",
            "gelu_tanh_bwd",
            "rms_norm_bwd",
            "layer_norm_bwd",
        ]
    )
    xr, wr, hr = (t.detach().clone().requires_grad_() for t in (x, w, h))
    ref = (
        F.gelu(F.rms_norm(F.layer_norm(xr, (8,), wr, None, 1e-5), (8,), wr, 1e-5), approximate="tanh").sum()
        + (F.silu(hr[:, :8]) * hr[:, 8:]).sum()
    )
    ref.backward()
    torch.testing.assert_close(loss, ref)
    for got, want in ((x, xr), (w, wr), (h, hr)):
        torch.testing.assert_close(got.grad, want.grad)


def test_rows_view_keeps_views_and_copies_only_what_it_must():
    h = torch.randn(4, 3, 10)
    gate, up = h.chunk(2, -1)
    g2, ld = ops.rows_view(gate)
    assert g2.data_ptr() == gate.data_ptr() and ld == 10 and g2.shape == (12, 5)
    u2, ld = ops.rows_view(up)
    assert u2.data_ptr() == h.data_ptr() + 5 * 4 and ld == 10
    c2, ld = ops.rows_view(torch.randn(7))
    assert c2.shape == (1, 7) and ld == 7
    t2, ld = ops.rows_view(torch.randn(5, 6).t())  # columns are not contiguous: copy
    assert t2.is_contiguous() and ld == 5
    e2, ld = ops.rows_view(torch.randn(1, 6).expand(4, 6))  # rows overlap (stride 0): copy
    assert e2.is_contiguous() and ld == 6


# -- the benchmark script ------------------------------------------------------------------------------
@no_gpu_only
def test_the_benchmark_exits_with_a_clear_message_without_a_gpu(benchmark_module, capsys):
    bench = benchmark_module
    with pytest.raises(SystemExit) as info:
        bench.main(["--json", "/nonexistent/never-written.json"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("benchmarks/kernel_bandwidth.py: needs a CUDA GPU, and torch.cuda.is_available() is False")
