"""CPU checks of the CUDA sources and the build: no GPU needed, only nvcc (skipped, saying so,
where there is none).

One session-scoped build compiles every ``csrc/*.cu`` alone (``nvcc -c``, in parallel) for sm_80
and sm_90, links the objects into the shared library and ctypes-loads it: that proves each file
compiles alone for both architectures, the whole library links, and every launcher exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from andrea_lab_cuda import _lib, build, ops

CSRC = build.SOURCES_DIR
CI_ARCHS = (80, 90)
NVCC = build.find_nvcc()
needs_nvcc = pytest.mark.skipif(
    NVCC is None,
    reason="nvcc not found (not in $CUDA_HOME/bin, not on PATH, not in "
    "/usr/local/cuda/bin): the CUDA sources cannot be compiled here",
)


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found: the CUDA sources cannot be compiled here")
    cache = tmp_path_factory.mktemp("cuda-cache")
    start = time.perf_counter()
    result = build.build_library(build.gencode_for_archs(CI_ARCHS), cache_dir=cache)
    BUILD_SECONDS.append(time.perf_counter() - start)
    return result


BUILD_SECONDS: list[float] = []


def exported_launchers() -> set[str]:
    """Every ``ANDREA_API <type> andrea_xxx(`` defined in the sources."""
    names = set()
    for path in CSRC.glob("*.cu"):
        names |= set(re.findall(r"ANDREA_API\s+[\w\s\*]+?\b(andrea_\w+)\s*\(", path.read_text()))
    return names


# -- the build --------------------------------------------------------------------------------------
@needs_nvcc
def test_every_source_compiles_alone_for_sm80_and_sm90(built):
    assert not built.cached, "the first build in a fresh cache directory must compile"
    log = built.log_path.read_text()
    sources = build.source_files()
    assert {p.name for p in sources} >= {
        "gelu.cu",
        "relu.cu",
        "swiglu.cu",
        "layer_norm.cu",
        "rms_norm.cu",
        "runtime.cu",
    }
    for src in sources:
        # One `nvcc -c` per file, for both architectures, and it succeeded.
        line = next(x for x in log.splitlines() if x.startswith("$ ") and " -c " in x and x.endswith(str(src)))
        for arch in CI_ARCHS:
            assert f"-gencode=arch=compute_{arch},code=sm_{arch}" in line
    assert log.count("[exit 0,") == len(sources) + 1  # every compile and the link
    print(f"\nbuilt {len(sources)} sources for sm_80+sm_90 and linked in {BUILD_SECONDS[0]:.1f} s")


@needs_nvcc
def test_library_loads_with_ctypes_and_exports_every_launcher(built):
    lib = _lib.CudaLibrary(built.path)  # raises if any symbol of SIGNATURES is missing or the ABI differs
    assert exported_launchers() == set(_lib.SIGNATURES), (
        "the launchers in csrc/ and the ctypes signatures in _lib.SIGNATURES must list the same functions"
    )
    assert lib.max_layer_norm_cols == ops.MAX_LAYER_NORM_COLS
    runtime, driver = lib.versions()
    assert runtime >= 11000
    assert driver >= 0


@needs_nvcc
@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) not installed")
def test_library_exports_only_its_own_symbols(built):
    """The statically linked CUDA runtime stays private: nothing can interpose with PyTorch's libcudart."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(built.path)], capture_output=True, text=True, check=True)
    symbols = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    functions = {s for s in symbols if not s.startswith(("_init", "_fini", "_edata", "_end", "__bss_start"))}
    assert functions == set(_lib.SIGNATURES), sorted(functions ^ set(_lib.SIGNATURES))


@needs_nvcc
def test_second_build_is_a_cache_hit(built):
    start = time.perf_counter()
    again = build.build_library(built.gencode, cache_dir=built.path.parent.parent)
    assert again.cached and again.path == built.path
    assert time.perf_counter() - start < 5.0
    manifest = (built.path.parent / "manifest.json").read_text()
    assert "sm_90" in manifest and "layer_norm.cu" in manifest
    # no temporary build directories are left behind
    assert not [p for p in built.path.parent.parent.iterdir() if p.name.startswith(".tmp-")]


@needs_nvcc
@pytest.mark.parametrize("spoiled", ["cache root", "entry", "library"])
def test_a_cached_library_others_could_replace_is_refused(built, tmp_path, spoiled):
    """The cached library is executed (ctypes): a cache writable by others, or owned by someone else, is
    refused with the path and the fix, never loaded."""
    cache = tmp_path / "cache"
    shutil.copytree(built.path.parent.parent, cache)
    assert build.build_library(built.gencode, cache_dir=cache).cached  # the private copy is fine
    target = {"cache root": cache, "entry": cache / built.key, "library": cache / built.key / built.path.name}[spoiled]
    target.chmod(target.stat().st_mode | 0o022)
    with pytest.raises(
        build.UntrustedCacheError,
        match=rf"refusing the kernel cache {re.escape(str(target))}: "
        r"it is writable by others .*chmod go-w",
    ):
        build.build_library(built.gencode, cache_dir=cache)
    target.chmod(target.stat().st_mode & ~0o022)
    if os.geteuid() == 0:  # only root can hand a file to another user
        os.chown(target, 12345, -1)
        with pytest.raises(build.UntrustedCacheError, match=r"owned by uid 12345, not by you"):
            build.build_library(built.gencode, cache_dir=cache)


# -- argument checks of the launchers (pure host code: no GPU involved) ------------------------------
@needs_nvcc
def test_launchers_reject_bad_arguments_before_touching_the_gpu(built):
    lib = _lib.CudaLibrary(built.path)
    invalid = 1  # cudaErrorInvalidValue
    assert lib.gelu_tanh_fwd(16, 32, 100, 7, 1, None) == invalid  # unknown dtype code
    assert lib.relu_fwd(16, 32, -1, 0, 1, None) == invalid  # negative size
    assert lib.gelu_tanh_fwd(None, 32, 100, 0, 1, None) == invalid  # null input
    assert lib.gelu_tanh_fwd(None, None, 0, 0, 1, None) == 0  # nothing to do: success, no launch
    assert lib.swiglu_fwd(16, 4, 32, 8, 64, 3, 8, 2, 1, None) == invalid  # row stride < cols
    # LayerNorm: width limits, weight dtype must equal the input's, delta and sum come together
    assert lib.layer_norm_fwd(16, None, None, None, None, 32, 48, 64, 4, 8193, 1e-5, 0, 0, None) == invalid
    assert lib.layer_norm_fwd(16, None, None, 80, None, 32, 48, 64, 4, 64, 1e-5, 2, 0, None) == invalid
    assert lib.layer_norm_fwd(16, 96, None, None, None, 32, 48, 64, 4, 64, 1e-5, 0, 0, None) == invalid
    assert lib.layer_norm_fwd(None, None, None, None, None, None, None, None, 0, 64, 1e-5, 0, 0, None) == 0
    # backward: a dw/db request needs a large enough workspace
    need = lib.layer_norm_bwd_workspace(100, 64, 0, 4)
    assert lib.layer_norm_bwd(16, 32, 48, 64, 80, None, 96, 112, 128, 144, need - 1, 100, 64, 0, 0, 4, None) == invalid
    # RMSNorm: the same width limit and dtype rule; a negative or NaN eps; rstd is needed for a backward
    assert lib.rms_norm_fwd(16, None, 32, 48, 4, 8193, 1e-5, 0, 0, None) == invalid
    assert lib.rms_norm_fwd(16, 80, 32, 48, 4, 64, 1e-5, 2, 0, None) == invalid
    assert lib.rms_norm_fwd(16, None, 32, 48, 4, 64, -1.0, 0, 0, None) == invalid
    assert lib.rms_norm_fwd(16, None, 32, 48, 4, 64, float("nan"), 0, 0, None) == invalid
    assert lib.rms_norm_fwd(None, None, None, None, 0, 64, 1e-5, 0, 0, None) == 0
    assert lib.rms_norm_fwd(None, None, 32, 48, 4, 64, 1e-5, 0, 0, None) == invalid
    need = lib.rms_norm_bwd_workspace(100, 64, 0, 4)
    assert lib.rms_norm_bwd(16, 32, 48, 64, 96, 112, 144, need - 1, 100, 64, 0, 0, 4, None) == invalid
    assert lib.rms_norm_bwd(16, 32, None, 64, 96, None, None, 0, 100, 64, 0, 0, 4, None) == invalid  # no rstd


@needs_nvcc
def test_layer_norm_workspace_size_is_pure_and_bounded(built):
    lib = _lib.CudaLibrary(built.path)
    for dtype in (0, 1, 2):
        for cols in (1, 64, 768, 1000, 4096, 8192):
            small = lib.layer_norm_bwd_workspace(3, cols, dtype, 132)
            big = lib.layer_norm_bwd_workspace(1 << 20, cols, dtype, 132)
            assert small > 0 and small % (2 * cols) == 0
            # at most ~one wave of blocks: 2 * (blocks) * cols floats, blocks <= 132 * 32
            assert big % (2 * cols) == 0 and big // (2 * cols) <= 132 * 32
            assert big == lib.layer_norm_bwd_workspace(1 << 20, cols, dtype, 132)  # deterministic
    assert lib.layer_norm_bwd_workspace(10, 8193, 0, 132) == -1
    assert lib.layer_norm_bwd_workspace(10, 64, 5, 132) == -1
    assert lib.layer_norm_bwd_workspace(0, 64, 0, 132) == 0


@needs_nvcc
def test_rms_norm_workspace_is_one_partial_row_per_backward_block(built):
    """RMSNorm reduces dw only: half of LayerNorm's dw + db workspace, over the same backward grid."""
    lib = _lib.CudaLibrary(built.path)
    for dtype in (0, 1, 2):
        for rows, cols in ((3, 1), (300, 768), (1 << 20, 1000), (1 << 20, 8192)):
            assert 2 * lib.rms_norm_bwd_workspace(rows, cols, dtype, 132) == lib.layer_norm_bwd_workspace(
                rows, cols, dtype, 132
            )
    assert lib.rms_norm_bwd_workspace(10, 8193, 0, 132) == -1
    assert lib.rms_norm_bwd_workspace(10, 64, 3, 132) == -1
    assert lib.rms_norm_bwd_workspace(0, 64, 0, 132) == 0


@needs_nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="launches with fake pointers are only safe without a GPU")
def test_a_launch_without_a_gpu_returns_a_cuda_error_that_reads_well(built):
    lib = _lib.CudaLibrary(built.path)
    code = lib.gelu_tanh_fwd(256, 512, 100, 0, 1, None)
    assert code != 0
    with pytest.raises(_lib.CudaKernelError, match=r"gelu_tanh forward failed with CUDA error \d+ \(cudaError"):
        lib.check(code, "gelu_tanh forward")
    assert lib.cuda_probe() != 0


# -- cache key, architecture choice, failures (no compile of the real sources) -----------------------
def fake_toolchain(**overrides) -> build.Toolchain:
    fields = dict(
        nvcc="/opt/cuda/bin/nvcc",
        version_text="Cuda compilation tools, release 13.0, V13.0.88",
        release="13.0",
        gpu_codes=("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"),
        gpu_archs=("compute_75", "compute_80", "compute_86", "compute_89", "compute_90", "compute_100", "compute_120"),
    )
    fields.update(overrides)
    return build.Toolchain(**fields)


def test_gencode_is_sass_for_the_device_or_ptx_for_a_newer_one():
    tc = fake_toolchain()
    assert build.gencode_for_arch(90, tc) == ("-gencode=arch=compute_90,code=sm_90",)
    assert build.gencode_for_arch(86, tc) == ("-gencode=arch=compute_86,code=sm_86",)
    # a GPU newer than this nvcc: PTX of the newest older architecture, JIT-compiled by the driver
    assert build.gencode_for_arch(130, tc) == ("-gencode=arch=compute_120,code=compute_120",)
    with pytest.raises(build.BuildError, match="cannot generate code for this GPU \\(sm_60\\)"):
        build.gencode_for_arch(60, tc)


def test_cache_key_covers_sources_nvcc_version_and_arch(tmp_path):
    src = tmp_path / "csrc"
    shutil.copytree(CSRC, src)
    tc = fake_toolchain()
    key = build.build_key(build.gencode_for_archs([90]), tc, src)
    assert key == build.build_key(build.gencode_for_archs([90]), tc, src)
    assert key != build.build_key(build.gencode_for_archs([80]), tc, src)
    assert key != build.build_key(build.gencode_for_archs([90]), fake_toolchain(version_text="release 12.8"), src)
    (src / "common.cuh").write_text((src / "common.cuh").read_text() + "\n// edited\n")
    assert key != build.build_key(build.gencode_for_archs([90]), tc, src)


def test_cache_root_follows_andrea_lab_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path))
    assert build.cache_root() == tmp_path / "cuda"
    monkeypatch.delenv("ANDREA_LAB_CACHE")
    assert build.cache_root() == Path.home() / ".cache" / "andrea-lab" / "cuda"


def test_find_nvcc_prefers_cuda_home(monkeypatch, tmp_path):
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert build.find_nvcc() == str(fake)


@needs_nvcc
def test_a_failed_build_raises_with_the_path_of_its_log(tmp_path):
    src = tmp_path / "csrc"
    src.mkdir()
    (src / "broken.cu").write_text("__global__ void k() { this_is_not_declared(); }\n")
    with pytest.raises(build.BuildError) as info:
        build.build_library(build.gencode_for_archs([80]), cache_dir=tmp_path / "cache", sources_dir=src)
    err = info.value
    assert "compiling broken.cu failed" in err.summary and "this_is_not_declared" in err.summary
    assert err.log_path is not None and err.log_path.is_file()
    assert "this_is_not_declared" in err.log_path.read_text()
    assert str(err.log_path) in str(err)
    # nothing half-built is left in the cache
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
