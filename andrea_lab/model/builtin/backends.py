"""The ``torch`` kernel backend: eager PyTorch, the reference every other backend is tested against."""

from andrea_lab.model.contracts import KernelBackend


class TorchBackend(KernelBackend):
    """Eager PyTorch ops (runs everywhere; the reference for other backends)."""

    description = "eager PyTorch ops (runs everywhere; the reference for other backends)"
