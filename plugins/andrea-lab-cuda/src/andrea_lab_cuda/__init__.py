"""andrea-lab-cuda: handwritten CUDA kernels for andrea-lab, as the ``cuda`` kernel backend.

Select it with ``model.config.kernel_backend: cuda``. The kernels (``csrc/*.cu``) are compiled by
nvcc on first use for the GPU in the machine and cached (see :mod:`andrea_lab_cuda.build`); they
are called through ``ctypes`` (:mod:`andrea_lab_cuda.ops`) inside PyTorch operators registered with
``torch.library.custom_op`` (:mod:`andrea_lab_cuda.custom_ops`), which ``torch.compile`` keeps.
"""

from andrea_lab_cuda.backend import CudaBackend, availability

__all__ = ["CudaBackend", "availability"]
__version__ = "0.1.0"
