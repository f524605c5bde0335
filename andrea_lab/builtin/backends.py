"""Kept public path: ``andrea_lab.builtin.backends`` re-exports :mod:`andrea_lab.plugins.builtin.backends`.

Plugin tests build the eager reference backend, ``TorchBackend``, from here; it is the registered
``torch`` backend's own class (its entry point names the new path). ``KernelBackend``, which the
module has always imported, comes along."""

from andrea_lab.plugins.builtin.backends import KernelBackend, TorchBackend

__all__ = ["KernelBackend", "TorchBackend"]
