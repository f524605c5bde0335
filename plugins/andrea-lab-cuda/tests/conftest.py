"""Shared fixtures of the andrea-lab-cuda tests.

Markers: ``gpu`` tests need a CUDA device. andrea-lab's pytest plugin (``andrea_lab.plugin.testing``,
installed with andrea-lab) skips them without one, and with ``ANDREA_REQUIRE_GPU=1`` turns every
such skip into a failure: the one switch for strict GPU runs. The markers are also registered in
this package's pyproject.toml; registering them here as well keeps ``--strict-markers`` happy when
these tests run from another rootdir.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Deterministic cuBLAS (the determinism tests compare whole training runs bit for bit). Must be
# set before the first cuBLAS handle exists, i.e. before any test runs.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
    config.addinivalue_line("markers", "slow: end-to-end runs that take more than a few seconds")


@pytest.fixture
def fresh_availability():
    """Forget the cached availability (and loaded libraries) before and after the test."""
    from andrea_lab_cuda import _lib, backend

    def reset():
        backend.availability.cache_clear()
        _lib._by_arch.clear()
        _lib._by_device.clear()

    reset()
    yield
    reset()


@pytest.fixture
def benchmark_module():
    """benchmarks/kernel_bandwidth.py of the andrea-lab checkout this plugin sits in, imported as a module."""
    import importlib.util
    import sys

    path = HERE.parents[2] / "benchmarks" / "kernel_bandwidth.py"
    if not path.is_file():
        pytest.skip(f"{path} not found (the plugin is not inside an andrea-lab checkout)")
    name = "andrea_benchmark_kernels"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
