"""The kernels as PyTorch operators (``torch.ops.andrea_lab_cuda.*``), so ``torch.compile`` keeps them.

A ctypes call cannot be traced, so a plain Python function that launches a kernel makes Dynamo
either break the graph or (as the backend once did) take the eager reference instead. Registered
with :func:`torch.library.custom_op`, each launcher is an opaque operator: the compiler sees it
through its fake implementation (shapes, dtypes and strides of the outputs, no data) and through
its autograd formula (another such operator), and calls the real kernel at run time.

Every operator has one implementation for all devices: CUDA tensors go to the kernels
(:mod:`andrea_lab_cuda.ops`), anything else to an eager reference of the kernel's contract (fp32
arithmetic, one rounding per output). The backend only ever calls these operators with tensors the
kernels take; the CPU path exists so that the registration (schema, fake, autograd) can be checked
with ``torch.library.opcheck`` and under ``torch.compile`` on a machine without a GPU.

Operators (first derivatives only: their backward operators have no autograd formula):

* ``gelu_tanh(x) -> y``, ``gelu_tanh_backward(dy, x) -> dx``
* ``relu(x) -> y``, ``relu_backward(dy, y) -> dx`` (masks with the saved output, like PyTorch)
* ``swiglu(gate, up) -> out``, ``swiglu_backward(dout, gate, up) -> (dgate, dup)``
* ``layer_norm(x, weight?, bias?, eps) -> (y, mean, rstd)``
* ``add_layer_norm(x, delta, weight?, bias?, eps) -> (sum, y, mean, rstd)``
* ``layer_norm_backward(dy, x, mean, rstd, weight?, dres?, need_dw, need_db) -> (dx, dw, db)``;
  ``dw``/``db`` are empty tensors when not asked for (an operator cannot return None).
* ``rms_norm(x, weight?, eps) -> (y, rstd)``, ``rms_norm_backward(dy, x, rstd, weight?, need_dw) -> (dx, dw)``
  (``dw`` empty when not asked for).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from andrea_lab_cuda import ops

NAMESPACE = "andrea_lab_cuda"


def uses_kernels(t: Tensor) -> bool:
    """Whether the real kernels run for ``t`` (a CUDA tensor); else the eager reference does.

    Module-level so the CPU tests can route CPU tensors to an emulation of the launchers.
    """
    return t.is_cuda


def _op(name: str):
    return torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=())


# -- GELU (tanh) ---------------------------------------------------------------------------------
@_op("gelu_tanh")
def gelu_tanh(x: Tensor) -> Tensor:
    x = x.contiguous()
    return ops.gelu_tanh_forward(x) if uses_kernels(x) else F.gelu(x.float(), approximate="tanh").to(x.dtype)


@_op("gelu_tanh_backward")
def gelu_tanh_backward(dy: Tensor, x: Tensor) -> Tensor:
    dy, x = dy.contiguous(), x.contiguous()
    if uses_kernels(x):
        return ops.gelu_tanh_backward(dy, x)
    return torch.ops.aten.gelu_backward(dy.float(), x.float(), approximate="tanh").to(x.dtype)


# -- ReLU ----------------------------------------------------------------------------------------
@_op("relu")
def relu(x: Tensor) -> Tensor:
    x = x.contiguous()
    return ops.relu_forward(x) if uses_kernels(x) else F.relu(x)


@_op("relu_backward")
def relu_backward(dy: Tensor, y: Tensor) -> Tensor:
    dy, y = dy.contiguous(), y.contiguous()
    return ops.relu_backward(dy, y) if uses_kernels(y) else torch.ops.aten.threshold_backward(dy, y, 0)


# -- SwiGLU: gate and up may be row-strided views (h.chunk(2, -1)), read in place by the kernel --
@_op("swiglu")
def swiglu(gate: Tensor, up: Tensor) -> Tensor:
    if uses_kernels(gate):
        return ops.swiglu_forward(gate, up)
    return (F.silu(gate.float()) * up.float()).to(gate.dtype).contiguous()


@_op("swiglu_backward")
def swiglu_backward(dout: Tensor, gate: Tensor, up: Tensor) -> tuple[Tensor, Tensor]:
    dout = dout.contiguous()
    if uses_kernels(gate):
        return ops.swiglu_backward(dout, gate, up)
    g, u, d = gate.float(), up.float(), dout.float()
    s = torch.sigmoid(g)
    dgate = (d * u * (s * (1 + g * (1 - s)))).to(gate.dtype).contiguous()
    return dgate, (d * g * s).to(up.dtype).contiguous()


# -- LayerNorm, and the fused residual add + LayerNorm -----------------------------------------------
def _rows(x: Tensor) -> Tensor:
    return x.contiguous().view(-1, x.shape[-1])


def _reference_layer_norm(s: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float):
    """(y, mean, rstd) of the rows of ``s`` in fp32, ``y`` rounded once to ``s``'s dtype."""
    xf = s.float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False) + eps)
    y = (xf - mean[:, None]) * rstd[:, None]
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(s.dtype), mean, rstd


@_op("layer_norm")
def layer_norm(
    x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    x2 = _rows(x)
    if uses_kernels(x):
        _, y, mean, rstd = ops.layer_norm_forward(x2, None, weight, bias, eps)
    else:
        y, mean, rstd = _reference_layer_norm(x2, weight, bias, eps)
    return y.view(x.shape), mean, rstd


@_op("add_layer_norm")
def add_layer_norm(
    x: Tensor, delta: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    x2, d2 = _rows(x), _rows(delta)
    if uses_kernels(x):
        summed, y, mean, rstd = ops.layer_norm_forward(x2, d2, weight, bias, eps)
    else:
        summed = x2 + d2  # rounded to the dtype once, exactly like the kernel's stored sum
        y, mean, rstd = _reference_layer_norm(summed, weight, bias, eps)
    return summed.view(x.shape), y.view(x.shape), mean, rstd


@_op("layer_norm_backward")
def layer_norm_backward(
    dy: Tensor,
    x: Tensor,
    mean: Tensor,
    rstd: Tensor,
    weight: Optional[Tensor],
    dres: Optional[Tensor],
    need_dw: bool,
    need_db: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    x2, dy2 = _rows(x), _rows(dy)
    dres2 = _rows(dres) if dres is not None else None
    if uses_kernels(x):
        dx, dw, db = ops.layer_norm_backward(dy2, x2, mean, rstd, weight, x.dtype, dres2, need_dw, need_db)
    else:
        dx, dw, db = _reference_layer_norm_backward(dy2, x2, mean, rstd, weight, dres2)
    return dx.view(x.shape), dw if need_dw else x.new_empty(0), db if need_db else x.new_empty(0)


def _reference_layer_norm_backward(dy, x, mean, rstd, weight, dres):
    xhat = (x.float() - mean[:, None]) * rstd[:, None]
    g = dy.float() * (weight.float() if weight is not None else 1.0)
    dx = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    if dres is not None:
        dx = dx + dres.float()
    dw = (dy.float() * xhat).sum(0).to(x.dtype)
    return dx.to(x.dtype), dw, dy.float().sum(0).to(x.dtype)


# -- RMSNorm ------------------------------------------------------------------------------------------
def _reference_rms_norm(x: Tensor, weight: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor]:
    """(y, rstd) of the rows of ``x`` in fp32, ``y`` rounded once to ``x``'s dtype."""
    xf = x.float()
    rstd = torch.rsqrt(xf.square().mean(-1) + eps)
    y = xf * rstd[:, None]
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype), rstd


@_op("rms_norm")
def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor]:
    x2 = _rows(x)
    if uses_kernels(x):
        y, rstd = ops.rms_norm_forward(x2, weight, eps)
    else:
        y, rstd = _reference_rms_norm(x2, weight, eps)
    return y.view(x.shape), rstd


@_op("rms_norm_backward")
def rms_norm_backward(
    dy: Tensor, x: Tensor, rstd: Tensor, weight: Optional[Tensor], need_dw: bool
) -> tuple[Tensor, Tensor]:
    x2, dy2 = _rows(x), _rows(dy)
    if uses_kernels(x):
        dx, dw = ops.rms_norm_backward(dy2, x2, rstd, weight, x.dtype, need_dw)
    else:
        xhat = x2.float() * rstd[:, None]
        g = dy2.float() * (weight.float() if weight is not None else 1.0)
        dx = (rstd[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True))).to(x.dtype)
        dw = (dy2.float() * xhat).sum(0).to(x.dtype)
    return dx.view(x.shape), dw if need_dw else x.new_empty(0)


# -- fake implementations: what the compiler sees (every output is contiguous) ----------------------
def _stats(x: Tensor) -> Tensor:
    return x.new_empty(x.numel() // x.shape[-1], dtype=torch.float32)


@gelu_tanh.register_fake
@relu.register_fake
def _(x):
    return x.new_empty(x.shape)


@gelu_tanh_backward.register_fake
@relu_backward.register_fake
def _(dy, x):
    return x.new_empty(x.shape)


@swiglu.register_fake
def _(gate, up):
    return gate.new_empty(gate.shape)


@swiglu_backward.register_fake
def _(dout, gate, up):
    return gate.new_empty(gate.shape), up.new_empty(up.shape)


@layer_norm.register_fake
def _(x, weight, bias, eps):
    return x.new_empty(x.shape), _stats(x), _stats(x)


@add_layer_norm.register_fake
def _(x, delta, weight, bias, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape), _stats(x), _stats(x)


@layer_norm_backward.register_fake
def _(dy, x, mean, rstd, weight, dres, need_dw, need_db):
    cols = x.shape[-1]
    return x.new_empty(x.shape), x.new_empty(cols if need_dw else 0), x.new_empty(cols if need_db else 0)


@rms_norm.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape), _stats(x)


@rms_norm_backward.register_fake
def _(dy, x, rstd, weight, need_dw):
    return x.new_empty(x.shape), x.new_empty(x.shape[-1] if need_dw else 0)


# -- autograd: each forward's derivative is its backward operator ------------------------------------
def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _save_output(ctx, inputs, output):
    ctx.save_for_backward(output)  # ReLU masks with its output, so its input can be freed


def _save_gate_up(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _save_layer_norm(ctx, inputs, output):
    x, weight, bias, _ = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.has_bias = bias is not None


def _save_add_layer_norm(ctx, inputs, output):
    _, _, weight, bias, _ = inputs
    ctx.set_materialize_grads(False)  # an unused output's gradient is None, not zeros: nothing to compute
    ctx.save_for_backward(output[0], weight, output[2], output[3])
    ctx.has_bias = bias is not None


def _save_rms_norm(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])


def _gelu_grad(ctx, dy):
    return gelu_tanh_backward(dy, ctx.saved_tensors[0])


def _relu_grad(ctx, dy):
    return relu_backward(dy, ctx.saved_tensors[0])


def _swiglu_grad(ctx, dout):
    return swiglu_backward(dout, *ctx.saved_tensors)


def _needs(ctx, weight: Optional[Tensor], first: int) -> tuple[bool, bool]:
    """Whether the weight's and the bias's gradients (inputs ``first`` and ``first + 1``) are wanted."""
    return weight is not None and ctx.needs_input_grad[first], ctx.has_bias and ctx.needs_input_grad[first + 1]


def _layer_norm_grad(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    need_dw, need_db = _needs(ctx, weight, 1)
    dx, dw, db = layer_norm_backward(dy, x, mean, rstd, weight, None, need_dw, need_db)
    return dx, dw if need_dw else None, db if need_db else None, None


def _add_layer_norm_grad(ctx, dsum, dy, _dmean, _drstd):
    summed, weight, mean, rstd = ctx.saved_tensors
    if dy is None:  # only the sum was used
        return dsum, dsum, None, None, None
    need_dw, need_db = _needs(ctx, weight, 2)
    dx, dw, db = layer_norm_backward(dy, summed, mean, rstd, weight, dsum, need_dw, need_db)
    return dx, dx, dw if need_dw else None, db if need_db else None, None


def _rms_norm_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    need_dw = weight is not None and ctx.needs_input_grad[1]
    dx, dw = rms_norm_backward(dy, x, rstd, weight, need_dw)
    return dx, dw if need_dw else None, None


gelu_tanh.register_autograd(_gelu_grad, setup_context=_save_input)
relu.register_autograd(_relu_grad, setup_context=_save_output)
swiglu.register_autograd(_swiglu_grad, setup_context=_save_gate_up)
layer_norm.register_autograd(_layer_norm_grad, setup_context=_save_layer_norm)
add_layer_norm.register_autograd(_add_layer_norm_grad, setup_context=_save_add_layer_norm)
rms_norm.register_autograd(_rms_norm_grad, setup_context=_save_rms_norm)
