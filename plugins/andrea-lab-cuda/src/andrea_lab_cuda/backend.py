"""The ``cuda`` kernel backend: handwritten CUDA kernels for andrea-lab's hot ops.

Registered in the entry-point group ``andrea_lab.kernel_backend`` under the name ``cuda``
(select it with ``model.config.kernel_backend: cuda``). Every op falls back to the eager
reference of :class:`andrea_lab.plugin.KernelBackend` (``super()``) for inputs the kernels do
not take: CPU tensors (Lightning builds the model on the CPU before moving it to the GPU), dtypes
other than fp32/fp16/bf16, empty tensors, mismatched shapes, devices or dtypes, and LayerNorm
widths above :data:`andrea_lab_cuda.ops.MAX_LAYER_NORM_COLS` (RMSNorm's limit too). The kernels are called through the
operators of :mod:`andrea_lab_cuda.custom_ops`, so ``torch.compile`` keeps them in its graph (as
opaque calls) instead of tracing the eager reference.
"""

from __future__ import annotations

from functools import cache

import torch

from andrea_lab.plugin import Availability, KernelBackend
from andrea_lab_cuda import _lib, build, custom_ops, ops
from andrea_lab_cuda._lib import DTYPE_CODES


def _no_device_reason() -> str:
    if torch.version.cuda is None:
        return (
            f"no CUDA device: this PyTorch ({torch.__version__}) is a CPU-only build, so "
            f"torch.cuda.is_available() is False; use a CUDA build of PyTorch on a machine with an "
            f"NVIDIA GPU, or select kernel_backend 'torch'"
        )
    return (
        f"no CUDA device: torch.cuda.is_available() is False (PyTorch {torch.__version__}, built for "
        f"CUDA {torch.version.cuda}, finds no usable GPU: check the NVIDIA driver and "
        f"CUDA_VISIBLE_DEVICES), or select kernel_backend 'torch'"
    )


def _no_nvcc_reason() -> str:
    import os

    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    where = f"$CUDA_HOME/bin ({home}/bin)" if home else "$CUDA_HOME/bin (CUDA_HOME is not set)"
    return (
        f"no nvcc: the CUDA compiler is neither on PATH nor in {where} nor in /usr/local/cuda/bin; "
        f"the cuda backend compiles its kernels on first use, so install the CUDA toolkit and put "
        f"nvcc on PATH or set CUDA_HOME, or select kernel_backend 'torch'"
    )


@cache
def availability() -> Availability:
    """Whether the kernels can run here, and if not exactly why. Cached for the process.

    Cheap where it fails early: without a GPU it only asks ``torch.cuda.is_available()``, without
    nvcc it only searches for it. With both, the first call in a process compiles the kernels for
    the current GPU (or takes them from the cache), loads them and runs an empty probe kernel.
    """
    if not torch.cuda.is_available():
        return Availability(False, _no_device_reason())
    nvcc = build.find_nvcc()
    if nvcc is None:
        return Availability(False, _no_nvcc_reason())
    device = torch.cuda.current_device()
    name = torch.cuda.get_device_name(device)
    try:
        arch = _lib.device_arch(device)
        lib = _lib.library_for_arch(arch)
    except build.BuildError as exc:
        where = f"; build log: {exc.log_path}" if exc.log_path else ""
        return Availability(False, f"building the CUDA kernels with {nvcc} failed: {exc.summary}{where}")
    except _lib.LibraryLoadError as exc:
        return Availability(False, f"the compiled CUDA kernels cannot be loaded: {exc}")
    # The probe runs on a stream of its own: it never syncs PyTorch's current stream, nor breaks a
    # CUDA graph being captured there.
    code = int(lib.cuda_probe())
    if code != 0:
        err_name, text = lib.error_text(code)
        runtime, driver = lib.versions()
        hint = ""
        if driver and driver < runtime:
            hint = (
                f"; the NVIDIA driver supports CUDA {_lib.format_cuda_version(driver)} but the kernels were "
                f"built by nvcc {_lib.format_cuda_version(runtime)} (CUDA runtime linked statically): "
                f"update the driver, or put an nvcc no newer than "
                f"{_lib.format_cuda_version(driver)} on PATH / in CUDA_HOME"
            )
        return Availability(
            False, f"the compiled CUDA kernels ({lib.path}) cannot run on {name} (sm_{arch}): {err_name}: {text}{hint}"
        )
    if lib.max_layer_norm_cols != ops.MAX_LAYER_NORM_COLS:
        return Availability(
            False,
            f"{lib.path} takes LayerNorm widths up to {lib.max_layer_norm_cols}, this "
            f"andrea-lab-cuda expects {ops.MAX_LAYER_NORM_COLS}: delete the cache and retry",
        )
    return Availability(True, f"sm_{arch} kernels for {name} from {lib.path}")


def _cuda_floats(*tensors: torch.Tensor | None) -> bool:
    """All given tensors are CUDA tensors of one supported dtype on one device, none empty: then the kernels
    take them, compiled or not (the operators are registered with fake and autograd implementations, so a
    compiled graph calls the kernels)."""
    first = tensors[0]
    if not first.is_cuda or first.dtype not in DTYPE_CODES or first.numel() == 0:
        return False
    return all(t is None or (t.device == first.device and t.dtype == first.dtype) for t in tensors[1:])


def _autocast_enabled() -> bool:
    try:
        return torch.is_autocast_enabled("cuda")
    except TypeError:  # torch < 2.4: the no-argument form means CUDA
        return torch.is_autocast_enabled()


class CudaBackend(KernelBackend):
    """Handwritten CUDA kernels: LayerNorm, fused residual add + LayerNorm, RMSNorm, GELU (tanh), ReLU, SwiGLU.

    RMSNorm has no fused residual add: a post-norm placement with ``norm: rmsnorm`` adds, then calls
    ``rms_norm`` (the :class:`~andrea_lab.plugin.Norm` default ``add_and_norm``).
    """

    description = "handwritten CUDA kernels: LayerNorm, fused add+LayerNorm, RMSNorm, GELU (tanh), ReLU, SwiGLU"

    @classmethod
    def availability(cls) -> Availability:
        return availability()

    # -- LayerNorm ------------------------------------------------------------------------------
    @staticmethod
    def _layer_norm_ok(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> bool:
        if x.dim() < 1 or not _cuda_floats(x):
            return False
        cols = x.shape[-1]
        if cols > ops.MAX_LAYER_NORM_COLS:
            return False
        # Parameters on x's device in x's dtype; anything else (e.g. PyTorch's "mixed" LayerNorm of
        # bf16 activations with fp32 parameters outside autocast) is left to eager PyTorch.
        return all(
            p is None or (p.shape == (cols,) and p.device == x.device and p.dtype == x.dtype) for p in (weight, bias)
        )

    def layer_norm(self, x, weight, bias, eps):
        if x.is_cuda and _autocast_enabled():  # PyTorch's autocast runs LayerNorm in fp32: so do we
            x, weight, bias = (_to_fp32(t) for t in (x, weight, bias))
        if not self._layer_norm_ok(x, weight, bias):
            return super().layer_norm(x, weight, bias, eps)
        return custom_ops.layer_norm(x, _contig(weight), _contig(bias), float(eps))[0]

    def add_layer_norm(self, x, delta, weight, bias, eps):
        if x.is_cuda and _autocast_enabled():
            if x.dtype != torch.float32 or delta.dtype != torch.float32:
                # The sum keeps its promoted 16-bit dtype, the LayerNorm runs in fp32: two ops.
                return super().add_layer_norm(x, delta, weight, bias, eps)
            weight, bias = _to_fp32(weight), _to_fp32(bias)
        if x.shape != delta.shape or not _cuda_floats(x, delta) or not self._layer_norm_ok(x, weight, bias):
            # x + delta, then this backend's layer_norm (itself accelerated when it can be).
            return super().add_layer_norm(x, delta, weight, bias, eps)
        summed, normed, _, _ = custom_ops.add_layer_norm(x, delta, _contig(weight), _contig(bias), float(eps))
        return summed, normed

    # -- RMSNorm --------------------------------------------------------------------------------
    @staticmethod
    def _rms_norm_ok(x: torch.Tensor, weight: torch.Tensor | None, eps) -> bool:
        if eps is None or x.dim() < 1 or not _cuda_floats(x) or x.shape[-1] > ops.MAX_RMS_NORM_COLS:
            return False
        if _autocast_enabled() and not (x.dtype == torch.float32 and (weight is None or weight.dtype == torch.float32)):
            # Under autocast only fp32 input and weight: PyTorch's autocast policy for the norm is its own, so
            # every other mix is left to it (eager F.rms_norm) rather than guessed.
            return False
        return weight is None or (
            weight.shape == x.shape[-1:] and weight.device == x.device and weight.dtype == x.dtype
        )

    def rms_norm(self, x, weight, eps):
        if not self._rms_norm_ok(x, weight, eps):
            return super().rms_norm(x, weight, eps)
        return custom_ops.rms_norm(x, _contig(weight), float(eps))[0]

    # -- activations ----------------------------------------------------------------------------
    def gelu_tanh(self, x):
        if not _cuda_floats(x):
            return super().gelu_tanh(x)
        return custom_ops.gelu_tanh(x)

    def relu(self, x):
        if not _cuda_floats(x):
            return super().relu(x)
        return custom_ops.relu(x)

    def swiglu(self, gate, up):
        if (
            gate.shape != up.shape
            or gate.dim() < 1
            or not _cuda_floats(gate, up)
            or gate.numel() > ops.MAX_SWIGLU_ELEMENTS
        ):
            return super().swiglu(gate, up)
        return custom_ops.swiglu(gate, up)  # reads row-strided views (h.chunk(2, -1)) in place


def _contig(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.contiguous() if t is not None else None


def _to_fp32(t: torch.Tensor | None) -> torch.Tensor | None:
    return t.float() if t is not None else None
