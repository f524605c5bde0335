"""Compile the kernels in ``csrc/`` into one shared library, once, and cache it across runs.

Every ``csrc/*.cu`` file is compiled alone (``nvcc -c``, all files in parallel) for the requested
GPU architectures, then the objects are linked into ``libandrea_lab_cuda.so`` with the CUDA
runtime linked statically (nvcc's default), so the library needs no torch headers and no CUDA
libraries at run time besides the driver.

The cache directory is ``$ANDREA_LAB_CACHE/cuda`` (or ``~/.cache/andrea-lab/cuda``); each build
lives in a subdirectory named by a hash of the sources, the nvcc version, the ``-gencode`` flags
and the compiler flags, so editing a kernel, changing nvcc or moving to another GPU architecture
builds anew while everything else reuses the cached library. A build is written to a temporary
directory and renamed into place (atomic), under a file lock so that concurrent processes (e.g.
one per GPU under DDP) compile once. A failed build writes its full log next to the cache entries
(``<key>.failed.log``) and raises :class:`BuildError` naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Sequence

from filelock import FileLock

from andrea_lab.plugin import atomic_write

#: Where the kernel sources are (shipped inside the package).
SOURCES_DIR = Path(__file__).resolve().parent / "csrc"
LIBRARY_NAME = "libandrea_lab_cuda.so"
#: Bump when the way the library is built changes in a way the flags below do not capture.
BUILD_SCHEME = 1
#: Flags for every ``nvcc -c``. No ``--use_fast_math``: the kernels are compared with PyTorch's
#: accurate tanhf/expf/division. Hidden visibility: only the ``ANDREA_API`` launchers are exported.
COMPILE_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden")
#: Flags for the link. ``--exclude-libs,ALL`` keeps the statically linked CUDA runtime's symbols
#: private, so they can never interpose with (or be interposed by) the libcudart that PyTorch loads.
LINK_FLAGS: tuple[str, ...] = ("-shared", "-Xlinker", "--exclude-libs,ALL")
#: Seconds one nvcc invocation may take before the build is declared failed.
NVCC_TIMEOUT_S = 900
CACHE_ENV_VAR = "ANDREA_LAB_CACHE"


class BuildError(RuntimeError):
    """The kernels could not be compiled or linked; ``log_path`` has the full nvcc output."""

    def __init__(self, summary: str, log_path: Path | None = None):
        self.summary = summary
        self.log_path = log_path
        super().__init__(f"{summary}; build log: {log_path}" if log_path else summary)


class UntrustedCacheError(BuildError):
    """The cached library (which is executed: it is loaded with ctypes) sits where someone else could
    have replaced it: a directory or file not owned by this user, or writable by others."""


def check_trusted(*paths: Path) -> None:
    """Refuse to use a cache path that another user owns or may write: whoever can write the compiled
    library can run code in every process that loads it."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    for path in paths:
        info = path.stat()
        if uid is not None and info.st_uid != uid:
            raise UntrustedCacheError(
                f"refusing the kernel cache {path}: it is owned by uid {info.st_uid}, not by you (uid {uid}); "
                f"the compiled library is executed, so its cache must be yours alone. Set {CACHE_ENV_VAR} to a "
                "directory of your own, or remove this one"
            )
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UntrustedCacheError(
                f"refusing the kernel cache {path}: it is writable by others (mode {stat.filemode(info.st_mode)}); "
                f"the compiled library is executed, so no one else may write it. Fix with `chmod go-w {path}`, "
                f"or set {CACHE_ENV_VAR} to a private directory"
            )


@dataclass(frozen=True)
class Toolchain:
    """An nvcc and what it says about itself."""

    nvcc: str
    version_text: str  # the full `nvcc --version` output (part of the cache key)
    release: str  # e.g. "13.0"
    gpu_codes: tuple[str, ...]  # real architectures it can compile to: ("sm_75", "sm_80", ...)
    gpu_archs: tuple[str, ...]  # virtual architectures (PTX): ("compute_75", ...)


@dataclass(frozen=True)
class BuiltLibrary:
    path: Path  # the .so
    key: str  # the cache key (its directory name)
    gencode: tuple[str, ...]
    cached: bool  # True when it came from the cache, False when this call compiled it
    log_path: Path


def cache_root() -> Path:
    """``$ANDREA_LAB_CACHE/cuda`` if the variable is set, else ``~/.cache/andrea-lab/cuda``."""
    env = os.environ.get(CACHE_ENV_VAR, "").strip()
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "andrea-lab"
    return base / "cuda"


def find_nvcc() -> str | None:
    """The nvcc to use: ``$CUDA_HOME/bin/nvcc`` (or ``$CUDA_PATH``), else ``nvcc`` on PATH, else
    ``/usr/local/cuda/bin/nvcc``; None when there is none."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var, "").strip()
        if home:
            candidates.append(Path(home) / "bin" / "nvcc")
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(Path(on_path))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def _run(cmd: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)


@cache
def toolchain(nvcc: str) -> Toolchain:
    """Ask ``nvcc`` for its version and the GPU architectures it supports (cached per path)."""
    try:
        version = _run([nvcc, "--version"])
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"cannot run {nvcc} --version: {exc}") from exc
    if version.returncode != 0:
        raise BuildError(
            f"{nvcc} --version failed (exit {version.returncode}): {(version.stderr or version.stdout).strip()[:300]}"
        )
    text = version.stdout.strip()
    match = re.search(r"release (\d+\.\d+)", text)
    release = match.group(1) if match else "unknown"

    def listing(flag: str) -> tuple[str, ...]:
        try:
            out = _run([nvcc, flag])
        except (OSError, subprocess.SubprocessError):
            return ()
        return tuple(out.stdout.split()) if out.returncode == 0 else ()

    return Toolchain(nvcc, text, release, listing("--list-gpu-code"), listing("--list-gpu-arch"))


def _numbered(names: Sequence[str], prefix: str) -> dict[int, str]:
    """{90: "sm_90", ...} for the plain (no a/f suffix) architectures in ``names``."""
    out = {}
    for name in names:
        m = re.fullmatch(rf"{prefix}_(\d+)", name)
        if m:
            out[int(m.group(1))] = name
    return out


def gencode_for_arch(arch: int | str, tc: Toolchain) -> tuple[str, ...]:
    """The ``-gencode`` flag for compute capability ``arch`` (e.g. 90 for 9.0).

    Real code (SASS) for that architecture when nvcc supports it; for a device newer than nvcc,
    PTX of the newest architecture nvcc knows that is not newer than the device (the driver
    compiles it at load time); a device older than everything nvcc supports is a build error.
    """
    arch = int(arch)
    codes, archs = _numbered(tc.gpu_codes, "sm"), _numbered(tc.gpu_archs, "compute")
    if not codes or arch in codes:  # an nvcc too old to list its architectures: just try
        return (f"-gencode=arch=compute_{arch},code=sm_{arch}",)
    older = [a for a in archs if a <= arch]
    if older:
        best = max(older)
        return (f"-gencode=arch=compute_{best},code=compute_{best}",)
    raise BuildError(
        f"nvcc {tc.release} ({tc.nvcc}) cannot generate code for this GPU (sm_{arch}); it "
        f"supports {', '.join(sorted(tc.gpu_codes))}: use an older CUDA toolkit for this GPU"
    )


def gencode_for_archs(archs: Sequence[int | str]) -> tuple[str, ...]:
    """Plain ``-gencode`` flags (SASS) for explicit architectures, e.g. ``[80, 90]`` for CI."""
    return tuple(f"-gencode=arch=compute_{int(a)},code=sm_{int(a)}" for a in archs)


def source_files(sources_dir: Path | None = None) -> list[Path]:
    """The translation units: every ``*.cu`` in the sources directory (headers are ``*.cuh``)."""
    return sorted(Path(sources_dir if sources_dir is not None else SOURCES_DIR).glob("*.cu"))


def build_key(gencode: Sequence[str], tc: Toolchain, sources_dir: Path | None = None) -> str:
    """The cache key: a hash of the sources, the nvcc version, the arch flags and the build flags."""
    sources_dir = Path(sources_dir) if sources_dir is not None else SOURCES_DIR
    digest = hashlib.sha256()

    def feed(*parts: str) -> None:
        for part in parts:
            digest.update(part.encode())
            digest.update(b"\0")

    feed(f"scheme={BUILD_SCHEME}", tc.version_text, *gencode, *COMPILE_FLAGS, *LINK_FLAGS)
    for path in sorted(Path(sources_dir).glob("*.cu")) + sorted(Path(sources_dir).glob("*.cuh")):
        feed(path.name)
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def _write_text(path: Path, text: str) -> None:
    """The build log, through andrea-lab's one atomic writer (fsync, then rename): a crash leaves the old
    log or the new one."""
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def _first_error(output: str) -> str:
    """The first line of compiler output that looks like an error, for the one-line summary."""
    for line in output.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0][:300] if lines else "no output"


def _format_step(
    cmd: Sequence[str], proc: subprocess.CompletedProcess | None, seconds: float, error: str | None = None
) -> str:
    head = f"$ {' '.join(cmd)}\n"
    if proc is None:
        return head + f"[failed to run: {error}]\n"
    return head + f"[exit {proc.returncode}, {seconds:.1f} s]\n{proc.stdout}{proc.stderr}\n"


def build_library(
    gencode: Sequence[str],
    *,
    nvcc: str | None = None,
    cache_dir: Path | None = None,
    sources_dir: Path | None = None,
    jobs: int | None = None,
) -> BuiltLibrary:
    """Return the library for these ``-gencode`` flags, compiling it if it is not cached yet.

    ``cache_dir`` defaults to :func:`cache_root`, ``sources_dir`` to :data:`SOURCES_DIR`, ``jobs``
    (parallel nvcc processes) to the number of CPUs. Raises :class:`BuildError` (with the build
    log's path) when nvcc is missing or fails.
    """
    sources_dir = Path(sources_dir) if sources_dir is not None else SOURCES_DIR
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise BuildError("no nvcc: the CUDA compiler is neither in $CUDA_HOME/bin nor on PATH")
    tc = toolchain(nvcc)
    gencode = tuple(gencode)
    sources = source_files(sources_dir)
    if not sources:
        raise BuildError(f"no CUDA sources (*.cu) in {sources_dir}")
    key = build_key(gencode, tc, sources_dir)
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(
            f"cannot create the kernel cache directory {root}: {exc} (set {CACHE_ENV_VAR} to a writable directory)"
        ) from exc
    final = root / key
    library = final / LIBRARY_NAME
    check_trusted(root)
    if library.is_file():
        check_trusted(final, library)
        return BuiltLibrary(library, key, gencode, True, final / "build.log")

    with FileLock(root / f"{key}.lock"):  # one build per key at a time, across processes
        if library.is_file():  # another process built it while we waited for the lock
            check_trusted(final, library)
            return BuiltLibrary(library, key, gencode, True, final / "build.log")
        _compile_into(final, root, key, nvcc, tc, gencode, sources, jobs)
    return BuiltLibrary(library, key, gencode, False, final / "build.log")


def _compile_into(
    final: Path,
    root: Path,
    key: str,
    nvcc: str,
    tc: Toolchain,
    gencode: tuple[str, ...],
    sources: Sequence[Path],
    jobs: int | None,
) -> None:
    """Compile and link in a private temporary folder under ``root``, then rename it to ``final`` in one
    step, so that a crash or a failed compile never leaves a half-built library where readers look."""
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    log: list[str] = [f"andrea-lab-cuda build {key}\nnvcc: {nvcc}\n{tc.version_text}\ngencode: {' '.join(gencode)}\n\n"]
    try:
        objects = _compile_all(nvcc, sources, gencode, tmp, log, jobs)
        cmd = [nvcc, *LINK_FLAGS, "-o", str(tmp / LIBRARY_NAME), *map(str, objects)]
        _step(cmd, log, f"linking {LIBRARY_NAME}")
        for obj in objects:
            obj.unlink()
        (tmp / "build.log").write_text("".join(log))
        (tmp / "manifest.json").write_text(
            json.dumps(
                {
                    "key": key,
                    "nvcc": nvcc,
                    "nvcc_release": tc.release,
                    "gencode": list(gencode),
                    "compile_flags": list(COMPILE_FLAGS),
                    "link_flags": list(LINK_FLAGS),
                    "sources": [p.name for p in sources],
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                },
                indent=2,
            )
        )
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
        if final.exists():  # a leftover without a library (e.g. deleted by hand): replace it
            shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
    except BuildError as exc:
        log_path = _write_failure_log(root, key, "".join(log))
        raise BuildError(exc.summary, log_path) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _step(cmd: Sequence[str], log: list[str], what: str) -> None:
    start = time.perf_counter()
    try:
        proc = _run(cmd)
    except (OSError, subprocess.SubprocessError) as exc:
        log.append(_format_step(cmd, None, 0.0, str(exc)))
        raise BuildError(f"{what}: could not run nvcc: {exc}") from exc
    log.append(_format_step(cmd, proc, time.perf_counter() - start))
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (nvcc exit {proc.returncode}): {_first_error(proc.stdout + proc.stderr)}")


def _compile_all(
    nvcc: str, sources: Sequence[Path], gencode: Sequence[str], out_dir: Path, log: list[str], jobs: int | None
) -> list[Path]:
    """``nvcc -c`` every source alone, in parallel; the objects in source order."""
    objects = [out_dir / f"{src.stem}.o" for src in sources]
    commands = [[nvcc, "-c", *COMPILE_FLAGS, *gencode, "-o", str(obj), str(src)] for src, obj in zip(sources, objects)]
    workers = max(1, min(len(commands), jobs or os.cpu_count() or 1))
    logs: list[list[str]] = [[] for _ in commands]
    errors: list[BuildError | None] = [None] * len(commands)

    def compile_one(i: int) -> None:
        try:
            _step(commands[i], logs[i], f"compiling {sources[i].name}")
        except BuildError as exc:
            errors[i] = exc

    # Biggest sources first: the longest compile starts at once, the small ones fill in around it.
    order = sorted(range(len(commands)), key=lambda i: -sources[i].stat().st_size)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(compile_one, order))
    for entries in logs:
        log.extend(entries)
    failed = [exc for exc in errors if exc is not None]
    if failed:
        raise BuildError("; ".join(exc.summary for exc in failed))
    return objects


def _write_failure_log(root: Path, key: str, text: str) -> Path:
    path = root / f"{key}.failed.log"
    try:
        _write_text(path, text)
    except OSError:
        path = Path(tempfile.gettempdir()) / f"andrea-lab-cuda-{key}.failed.log"
        _write_text(path, text)
    return path
