"""Thin launch helpers: one per kernel, from PyTorch tensors to the ctypes launcher.

The helpers (``*_forward`` / ``*_backward``) take CUDA tensors of a supported dtype in the layout
they state (the operators of :mod:`andrea_lab_cuda.custom_ops` make inputs contiguous before
calling), allocate the outputs with PyTorch's caching allocator and launch on the tensor's device,
on PyTorch's current stream, so the kernels are ordered with every other op exactly like a native
PyTorch kernel (and are captured into a CUDA graph like one).
"""

from __future__ import annotations

import functools

import torch

from andrea_lab_cuda import _lib
from andrea_lab_cuda._lib import DTYPE_CODES

#: The largest normalised dimension the LayerNorm and RMSNorm kernels take (csrc/norm.cuh: kMaxCols,
#: one kernel for both); the backend uses eager PyTorch above it.
MAX_LAYER_NORM_COLS = 8192
MAX_RMS_NORM_COLS = MAX_LAYER_NORM_COLS
#: SwiGLU indexes rows with 32-bit arithmetic; bigger tensors go to eager PyTorch.
MAX_SWIGLU_ELEMENTS = 2**32 - 1


def _on_device(fn):
    """Run ``fn(t, ...)`` with ``t``'s device current (a plain call in the usual one-device case)."""

    @functools.wraps(fn)
    def wrapper(t: torch.Tensor, *args):
        index = t.device.index
        if index is not None and index != torch.cuda.current_device():
            with torch.cuda.device(index):
                return fn(t, *args)
        return fn(t, *args)

    return wrapper


#: The raw handle of the current stream, without building a torch.cuda.Stream object (the private
#: function triton uses too); the public API where it does not exist.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _launch_context(t: torch.Tensor) -> tuple[_lib.CudaLibrary, int, int]:
    """(library, SM count, current stream handle) for the device of ``t``."""
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    lib, sms = _lib.device_context(index)
    stream = _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(t.device).cuda_stream
    return lib, sms, stream


def _ptr(t: torch.Tensor | None) -> int | None:
    return t.data_ptr() if t is not None else None


def _contiguous(op: str, *tensors: torch.Tensor | None) -> None:
    """The flat kernels index their operands as dense arrays: refuse anything else loudly."""
    for t in tensors:
        if t is not None and not t.is_contiguous():
            raise ValueError(f"andrea-lab-cuda {op}: expected contiguous tensors (the backend makes them so)")


def _empty(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor like the contiguous ``t`` (empty_like: about half the cost of empty)."""
    return torch.empty_like(t)


def rows_view(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``t`` as ``(rows, cols)`` with contiguous rows, and its row stride in elements.

    A view when one exists, e.g. for either half of ``h.chunk(2, dim=-1)`` (row stride ``2·cols``),
    otherwise a contiguous copy (row stride ``cols``).
    """
    cols = t.shape[-1]
    t2 = t.reshape(-1, cols)
    if cols > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    ld = t2.stride(0) if t2.shape[0] > 1 else cols
    if ld < cols:  # overlapping rows (e.g. an expanded tensor): copy
        t2, ld = t2.contiguous(), cols
    return t2, ld


# ------------------------------------------------------------------------------------------------
# Launch helpers
# ------------------------------------------------------------------------------------------------
@_on_device
def gelu_tanh_forward(x: torch.Tensor) -> torch.Tensor:
    """GELU (tanh approximation) of a contiguous CUDA tensor."""
    _contiguous("gelu_tanh forward", x)
    y = _empty(x)
    lib, sms, stream = _launch_context(x)
    lib.check(
        lib.gelu_tanh_fwd(x.data_ptr(), y.data_ptr(), x.numel(), DTYPE_CODES[x.dtype], sms, stream), "gelu_tanh forward"
    )
    return y


@_on_device
def gelu_tanh_backward(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    _contiguous("gelu_tanh backward", dy, x)
    dx = _empty(x)
    lib, sms, stream = _launch_context(x)
    lib.check(
        lib.gelu_tanh_bwd(dy.data_ptr(), x.data_ptr(), dx.data_ptr(), x.numel(), DTYPE_CODES[x.dtype], sms, stream),
        "gelu_tanh backward",
    )
    return dx


@_on_device
def relu_forward(x: torch.Tensor) -> torch.Tensor:
    _contiguous("relu forward", x)
    y = _empty(x)
    lib, sms, stream = _launch_context(x)
    lib.check(lib.relu_fwd(x.data_ptr(), y.data_ptr(), x.numel(), DTYPE_CODES[x.dtype], sms, stream), "relu forward")
    return y


@_on_device
def relu_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _contiguous("relu backward", dy, y)
    dx = _empty(y)
    lib, sms, stream = _launch_context(y)
    lib.check(
        lib.relu_bwd(dy.data_ptr(), y.data_ptr(), dx.data_ptr(), y.numel(), DTYPE_CODES[y.dtype], sms, stream),
        "relu backward",
    )
    return dx


@_on_device
def swiglu_forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``; gate and up need only contiguous rows (see :func:`rows_view`)."""
    g2, ld_g = rows_view(gate)
    u2, ld_u = rows_view(up)
    rows, cols = g2.shape
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    lib, sms, stream = _launch_context(gate)
    lib.check(
        lib.swiglu_fwd(
            g2.data_ptr(), ld_g, u2.data_ptr(), ld_u, out.data_ptr(), rows, cols, DTYPE_CODES[gate.dtype], sms, stream
        ),
        "swiglu forward",
    )
    return out


@_on_device
def swiglu_backward(dout: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dgate, dup), both contiguous; ``dout`` must be contiguous."""
    _contiguous("swiglu backward", dout)
    g2, ld_g = rows_view(gate)
    u2, ld_u = rows_view(up)
    rows, cols = g2.shape
    dgate = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    dup = torch.empty(up.shape, dtype=up.dtype, device=up.device)
    lib, sms, stream = _launch_context(gate)
    lib.check(
        lib.swiglu_bwd(
            dout.data_ptr(),
            g2.data_ptr(),
            ld_g,
            u2.data_ptr(),
            ld_u,
            dgate.data_ptr(),
            dup.data_ptr(),
            rows,
            cols,
            DTYPE_CODES[gate.dtype],
            sms,
            stream,
        ),
        "swiglu backward",
    )
    return dgate, dup


def _weight_dtype(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> torch.dtype:
    if weight is not None:
        return weight.dtype
    if bias is not None:
        return bias.dtype
    return x.dtype


@_on_device
def layer_norm_forward(
    x2: torch.Tensor, delta2: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm of the rows of contiguous ``x2`` (rows, cols), or of ``x2 + delta2`` when given.

    Returns ``(sum or None, y, mean, rstd)``; mean and rstd are fp32, one per row.
    """
    _contiguous("layer_norm forward", x2, delta2, weight, bias)
    rows, cols = x2.shape
    y = _empty(x2)
    summed = _empty(x2) if delta2 is not None else None
    mean = torch.empty(rows, dtype=torch.float32, device=x2.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x2.device)
    lib, _, stream = _launch_context(x2)
    lib.check(
        lib.layer_norm_fwd(
            x2.data_ptr(),
            _ptr(delta2),
            _ptr(summed),
            _ptr(weight),
            _ptr(bias),
            y.data_ptr(),
            mean.data_ptr(),
            rstd.data_ptr(),
            rows,
            cols,
            float(eps),
            DTYPE_CODES[x2.dtype],
            DTYPE_CODES[_weight_dtype(x2, weight, bias)],
            stream,
        ),
        "layer_norm forward",
    )
    return summed, y, mean, rstd


@_on_device
def layer_norm_backward(
    dy2: torch.Tensor,
    x2: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    wdtype: torch.dtype,
    dres2: torch.Tensor | None,
    need_dw: bool,
    need_db: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(dx [+ dres], dweight, dbias) for contiguous (rows, cols) ``dy2``/``x2``/``dres2``.

    dweight and dbias (in ``wdtype``) are reduced deterministically: no atomics.
    """
    _contiguous("layer_norm backward", dy2, x2, mean, rstd, weight, dres2)
    rows, cols = x2.shape
    dx = _empty(x2)
    dw = torch.empty(cols, dtype=wdtype, device=x2.device) if need_dw else None
    db = torch.empty(cols, dtype=wdtype, device=x2.device) if need_db else None
    lib, sms, stream = _launch_context(x2)
    code = DTYPE_CODES[x2.dtype]
    workspace, floats = None, 0
    if need_dw or need_db:
        floats = int(lib.layer_norm_bwd_workspace(rows, cols, code, sms))
        workspace = torch.empty(max(floats, 1), dtype=torch.float32, device=x2.device)
    lib.check(
        lib.layer_norm_bwd(
            dy2.data_ptr(),
            x2.data_ptr(),
            mean.data_ptr(),
            rstd.data_ptr(),
            _ptr(weight),
            _ptr(dres2),
            dx.data_ptr(),
            _ptr(dw),
            _ptr(db),
            _ptr(workspace),
            floats,
            rows,
            cols,
            code,
            DTYPE_CODES[wdtype],
            sms,
            stream,
        ),
        "layer_norm backward",
    )
    return dx, dw, db


@_on_device
def rms_norm_forward(x2: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of the rows of contiguous ``x2`` (rows, cols): ``(y, rstd)``, rstd fp32, one per row."""
    _contiguous("rms_norm forward", x2, weight)
    rows, cols = x2.shape
    y = _empty(x2)
    rstd = torch.empty(rows, dtype=torch.float32, device=x2.device)
    lib, _, stream = _launch_context(x2)
    lib.check(
        lib.rms_norm_fwd(
            x2.data_ptr(),
            _ptr(weight),
            y.data_ptr(),
            rstd.data_ptr(),
            rows,
            cols,
            float(eps),
            DTYPE_CODES[x2.dtype],
            DTYPE_CODES[_weight_dtype(x2, weight, None)],
            stream,
        ),
        "rms_norm forward",
    )
    return y, rstd


@_on_device
def rms_norm_backward(
    dy2: torch.Tensor,
    x2: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    wdtype: torch.dtype,
    need_dw: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dx, dweight) for contiguous (rows, cols) ``dy2``/``x2``; dweight (in ``wdtype``) is reduced
    deterministically, like LayerNorm's: no atomics."""
    _contiguous("rms_norm backward", dy2, x2, rstd, weight)
    rows, cols = x2.shape
    dx = _empty(x2)
    dw = torch.empty(cols, dtype=wdtype, device=x2.device) if need_dw else None
    lib, sms, stream = _launch_context(x2)
    code = DTYPE_CODES[x2.dtype]
    workspace, floats = None, 0
    if need_dw:
        floats = int(lib.rms_norm_bwd_workspace(rows, cols, code, sms))
        workspace = torch.empty(max(floats, 1), dtype=torch.float32, device=x2.device)
    lib.check(
        lib.rms_norm_bwd(
            dy2.data_ptr(),
            x2.data_ptr(),
            rstd.data_ptr(),
            _ptr(weight),
            dx.data_ptr(),
            _ptr(dw),
            _ptr(workspace),
            floats,
            rows,
            cols,
            code,
            DTYPE_CODES[wdtype],
            sms,
            stream,
        ),
        "rms_norm backward",
    )
    return dx, dw
