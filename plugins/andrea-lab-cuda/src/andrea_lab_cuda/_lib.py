"""The compiled library, seen from Python through ``ctypes``.

``SIGNATURES`` lists every ``extern "C"`` launcher of ``csrc/`` with its C types; loading checks
that each one exists and that the library's ABI version is the one this wrapper was written for.
Launchers return a ``cudaError_t``; :meth:`CudaLibrary.check` turns a non-zero one into a
:class:`CudaKernelError` whose message names the op and the CUDA error.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import torch

from andrea_lab_cuda import build

#: Must equal ANDREA_CUDA_ABI_VERSION in csrc/runtime.cu.
ABI_VERSION = 3

#: The dtype codes of csrc/common.cuh (enum DType).
DTYPE_CODES: dict[torch.dtype, int] = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

_P = ctypes.c_void_p  # a device pointer, or a cudaStream_t
_I64 = ctypes.c_int64
_I = ctypes.c_int
_F = ctypes.c_float

#: name -> (restype, argtypes), for every symbol the library exports.
SIGNATURES: dict[str, tuple[type, tuple[type, ...]]] = {
    # runtime.cu
    "andrea_cuda_abi_version": (_I, ()),
    "andrea_cuda_runtime_version": (_I, ()),
    "andrea_cuda_driver_version": (_I, ()),
    "andrea_cuda_error_name": (ctypes.c_char_p, (_I,)),
    "andrea_cuda_error_string": (ctypes.c_char_p, (_I,)),
    "andrea_cuda_probe": (_I, ()),
    # gelu.cu: (x, y, n, dtype, sm_count, stream) / (dy, x, dx, n, dtype, sm_count, stream)
    "andrea_gelu_tanh_fwd": (_I, (_P, _P, _I64, _I, _I, _P)),
    "andrea_gelu_tanh_bwd": (_I, (_P, _P, _P, _I64, _I, _I, _P)),
    # relu.cu: (x, y, n, ...) / (dy, y, dx, n, ...)
    "andrea_relu_fwd": (_I, (_P, _P, _I64, _I, _I, _P)),
    "andrea_relu_bwd": (_I, (_P, _P, _P, _I64, _I, _I, _P)),
    # swiglu.cu: (gate, ld_gate, up, ld_up, out, rows, cols, dtype, sm_count, stream)
    "andrea_swiglu_fwd": (_I, (_P, _I64, _P, _I64, _P, _I64, _I64, _I, _I, _P)),
    # (dout, gate, ld_gate, up, ld_up, dgate, dup, rows, cols, dtype, sm_count, stream)
    "andrea_swiglu_bwd": (_I, (_P, _P, _I64, _P, _I64, _P, _P, _I64, _I64, _I, _I, _P)),
    # layer_norm.cu
    "andrea_layer_norm_max_cols": (_I64, ()),
    # (x, delta, sum_out, w, b, y, mean, rstd, rows, cols, eps, dtype, wdtype, stream)
    "andrea_layer_norm_fwd": (_I, (_P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _F, _I, _I, _P)),
    # (rows, cols, dtype, sm_count)
    "andrea_layer_norm_bwd_workspace": (_I64, (_I64, _I64, _I, _I)),
    # (dy, x, mean, rstd, w, dres, dx, dw, db, workspace, workspace_floats, rows, cols, dtype, wdtype,
    #  sm_count, stream)
    "andrea_layer_norm_bwd": (_I, (_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I, _I, _I, _P)),
    # rms_norm.cu (the width limit is LayerNorm's: one kernel, norm.cuh)
    # (x, w, y, rstd, rows, cols, eps, dtype, wdtype, stream)
    "andrea_rms_norm_fwd": (_I, (_P, _P, _P, _P, _I64, _I64, _F, _I, _I, _P)),
    # (rows, cols, dtype, sm_count)
    "andrea_rms_norm_bwd_workspace": (_I64, (_I64, _I64, _I, _I)),
    # (dy, x, rstd, w, dx, dw, workspace, workspace_floats, rows, cols, dtype, wdtype, sm_count, stream)
    "andrea_rms_norm_bwd": (_I, (_P, _P, _P, _P, _P, _P, _P, _I64, _I64, _I64, _I, _I, _I, _P)),
}


class CudaKernelError(RuntimeError):
    """A launcher returned a CUDA error."""

    def __init__(self, op: str, code: int, name: str, text: str):
        self.op, self.code = op, code
        super().__init__(f"andrea-lab-cuda: {op} failed with CUDA error {code} ({name}: {text})")


class LibraryLoadError(RuntimeError):
    """The .so exists but cannot be used (missing symbols, wrong ABI version, dlopen failure)."""


class CudaLibrary:
    """A loaded ``libandrea_lab_cuda.so``: each launcher is an attribute without the ``andrea_`` prefix."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        try:
            self._dll = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise LibraryLoadError(f"cannot load {self.path}: {exc}") from exc
        missing = [name for name in SIGNATURES if not hasattr(self._dll, name)]
        if missing:
            raise LibraryLoadError(f"{self.path} lacks the symbols {', '.join(missing)}")
        for name, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(self._dll, name)
            fn.restype, fn.argtypes = restype, list(argtypes)
            setattr(self, name.removeprefix("andrea_"), fn)
        abi = self.cuda_abi_version()
        if abi != ABI_VERSION:
            raise LibraryLoadError(
                f"{self.path} has ABI version {abi}, this andrea-lab-cuda expects "
                f"{ABI_VERSION}; delete the cache directory and retry"
            )
        self.max_layer_norm_cols = int(self.layer_norm_max_cols())

    def error_text(self, code: int) -> tuple[str, str]:
        name = self.cuda_error_name(code) or b"?"
        text = self.cuda_error_string(code) or b"?"
        return name.decode(errors="replace"), text.decode(errors="replace")

    def check(self, code: int, op: str) -> None:
        if code != 0:
            raise CudaKernelError(op, code, *self.error_text(code))

    def versions(self) -> tuple[int, int]:
        """(runtime, driver) CUDA versions as integers (13000 = 13.0); driver 0 = no driver."""
        return int(self.cuda_runtime_version()), int(self.cuda_driver_version())


def format_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}" if v else "none"


# ------------------------------------------------------------------------------------------------
# One library per GPU architecture, built on first use and cached (on disk and in the process).
# ------------------------------------------------------------------------------------------------
_lock = threading.Lock()
_by_arch: dict[int, CudaLibrary] = {}
_by_device: dict[int, tuple[CudaLibrary, int]] = {}


def device_arch(device_index: int) -> int:
    major, minor = torch.cuda.get_device_capability(device_index)
    return major * 10 + minor


def library_for_arch(arch: int) -> CudaLibrary:
    """Build (or take from the cache) and load the library for compute capability ``arch``."""
    with _lock:
        lib = _by_arch.get(arch)
        if lib is None:
            nvcc = build.find_nvcc()
            if nvcc is None:
                raise build.BuildError("no nvcc: the CUDA compiler is neither in $CUDA_HOME/bin nor on PATH")
            gencode = build.gencode_for_arch(arch, build.toolchain(nvcc))
            built = build.build_library(gencode, nvcc=nvcc)
            lib = _by_arch[arch] = CudaLibrary(built.path)
        return lib


def device_context(device_index: int) -> tuple[CudaLibrary, int]:
    """(library, SM count) for a CUDA device index, cached: what every launch needs."""
    ctx = _by_device.get(device_index)
    if ctx is None:
        sms = int(torch.cuda.get_device_properties(device_index).multi_processor_count)
        ctx = _by_device[device_index] = (library_for_arch(device_arch(device_index)), sms)
    return ctx
