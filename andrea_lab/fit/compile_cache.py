"""A compile paid once per model shape: torch.compile's on-disk caches kept in the user's own andrea-lab cache.

A compiled fit spends its first step compiling: at cpu-base's shape about two minutes on a loaded 2-core
machine, more than the fit's 250 steps take eager. Inductor keeps what it compiled (its FX-graph cache, the
AOTAutograd cache, Dynamo's profile of which sizes vary) in ``TORCHINDUCTOR_CACHE_DIR``; a later process that
compiles the same graphs loads them instead (measured: docs/performance.md, "A compile paid once per shape").
Left alone, that directory is ``/tmp/torchinductor_<user>``: in a world-writable ``/tmp``, cleared at reboot,
and shared by every torch program. What it holds is code that the next compile loads and runs, so andrea
points it at the user's own cache instead, one entry per key:

``<cache root>/compile/<key[:16]>/`` (cache root: ``$ANDREA_LAB_CACHE`` or ``~/.cache/andrea-lab``, never a
folder named in a config or handed over with a run), where the key is the sha256 of everything that makes a
compile differ: the torch and Python versions, the CPU's capability and bf16 flags, andrea-lab's version and
every installed plugin distribution's (group ``andrea_lab.*``), the model config and the precision. Another
torch, another plugin version or another shape is another entry: never read, never deleted (``rm -r`` the
``compile`` folder to reclaim the space). Inductor checks its own keys inside an entry as well.

What cannot be used is never fatal: an entry on a path with a symbolic link, one not owned by this user or
writable by others, an unwritable cache root or a disk with less than :data:`MIN_FREE_BYTES` free gives one
line on stderr, and the fit compiles into a private temporary directory (a cold compile, removed at exit).
A ``TORCHINDUCTOR_CACHE_DIR`` the user set themselves is theirs: it is used as it is, with nothing said (one
that holds Inductor's default is Inductor's own doing: it writes the variable when it first looks for its cache).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from andrea_lab.data.cache_root import default_cache_root
from andrea_lab.runs.machine import cpu_description

#: Inductor's own variable: where its FX-graph, AOTAutograd and PGO caches (and generated code) live.
INDUCTOR_ENV_VAR = "TORCHINDUCTOR_CACHE_DIR"
#: The cache root's sub-folder that holds the compile entries.
COMPILE_DIR = "compile"
#: Below this much free space on the cache's disk the fit compiles into a temporary directory instead: one
#: shape's entry is a few MB, but a compile that fills the disk would fail mid-write (measured: about 5 MB).
MIN_FREE_BYTES = 256 << 20

#: The value this module last gave ``TORCHINDUCTOR_CACHE_DIR`` in this process (not the user's own setting).
_ours: Optional[str] = None


@dataclass(frozen=True)
class CompileCache:
    """Where this process's compile caches live, and why: ``state`` is ``warm`` (the entry holds an earlier
    compile), ``cold`` (a new entry), ``user`` (the user's own ``TORCHINDUCTOR_CACHE_DIR``) or ``private``
    (a temporary directory; ``reason`` says why the entry could not be used)."""

    directory: str
    key: str
    state: str
    reason: str = ""

    def as_record(self) -> dict[str, Any]:
        return {"directory": self.directory, "key": self.key, "state": self.state, "reason": self.reason}


def _plugin_versions() -> list[str]:
    """``name==version`` of andrea-lab and of every distribution that registers an ``andrea_lab.*`` plugin."""
    names = {"andrea-lab"}
    for dist in metadata.distributions():
        try:
            if any(ep.group.startswith("andrea_lab.") for ep in dist.entry_points):
                names.add(dist.metadata["Name"])
        except Exception:  # a broken distribution's metadata: not ours to judge here
            continue
    versions = []
    for name in sorted(n for n in names if n):
        try:
            versions.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}==?")
    return versions


def _cpu_identity() -> dict[str, Any]:
    return {"capability": torch.backends.cpu.get_cpu_capability(), **cpu_description()}


def compile_key(model_config: Mapping[str, Any], precision: str) -> str:
    """The sha256 that names one compile entry: torch, Python, CPU, andrea-lab and plugin versions, the model
    config and the precision (JSON with sorted keys, so a dict's order does not matter)."""
    identity = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cpu": _cpu_identity(),
        "plugins": _plugin_versions(),
        "model": dict(model_config),
        "precision": str(precision),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def entry_of(model_config: Mapping[str, Any], precision: str, root: Optional[Path] = None) -> Path:
    """The entry a compile of this model at this precision uses (it may not exist yet)."""
    root = Path(os.path.abspath(root if root is not None else default_cache_root()))
    return root / COMPILE_DIR / compile_key(model_config, precision)[:16]


def is_warm(model_config: Mapping[str, Any], precision: str) -> bool:
    """Whether this user's cache already holds a compile of this model at this precision (a sweep's speed rule
    counts only the warm compile's cost then); never follows a link."""
    entry = entry_of(model_config, precision)
    return entry.is_dir() and not entry.is_symlink() and any(entry.iterdir())


def unusable(root: Path, entry: Path) -> Optional[str]:
    """Why ``entry`` (inside ``root``) cannot hold compiled code, or None; it is created (mode 0700) if it
    can be. Nothing is followed through a link, and nothing another user could have written is trusted."""
    try:
        for step in [root, *[p for p in reversed(entry.parents) if root in p.parents], entry]:
            if step.is_symlink():
                return f"{step} is a symbolic link"
        # Both made 0700 here (not by mkdir's parents, which follow the umask: 002 would make them group-writable).
        (root / COMPILE_DIR).mkdir(parents=True, exist_ok=True, mode=0o700)
        entry.mkdir(exist_ok=True, mode=0o700)
        for step in (root / COMPILE_DIR, entry):
            info = os.lstat(step)
            if info.st_uid != os.getuid():
                return f"{step} belongs to another user"
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return f"{step} is writable by others"
        if not os.access(entry, os.W_OK | os.X_OK):
            return f"{entry} is not writable"
        free = shutil.disk_usage(entry).free
    except OSError as exc:
        return f"{exc.filename or root}: {exc.strerror or exc}"
    if free < MIN_FREE_BYTES:
        return f"its disk has {free >> 20} MiB free (under {MIN_FREE_BYTES >> 20} MiB)"
    return None


def _torch_default() -> str:
    """Inductor's own default (``/tmp/torchinductor_<user>``), which it also writes into the variable the first
    time it asks for its cache: a variable holding it was not set by the user."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # here: Inductor only when compiling

    return os.path.abspath(default_cache_dir())


def _private_directory() -> str:
    directory = tempfile.mkdtemp(prefix="andrea-compile-")
    atexit.register(shutil.rmtree, directory, True)
    return directory


def use_compile_cache(
    model_config: Mapping[str, Any], precision: str, root: Optional[Path] = None, err: Any = None
) -> CompileCache:
    """Point Inductor's caches at this model's entry before anything is compiled in this process (it reads
    ``TORCHINDUCTOR_CACHE_DIR`` when it first compiles); returns where and why."""
    key = compile_key(model_config, precision)[:16]
    global _ours
    own = os.environ.get(INDUCTOR_ENV_VAR)
    if own and own not in (_ours, _torch_default()):
        return CompileCache(own, key, "user")
    root = Path(os.path.abspath(root if root is not None else default_cache_root()))
    entry = root / COMPILE_DIR / key
    reason = unusable(root, entry)
    if reason is not None:
        directory = _private_directory()
        print(
            f"compile cache: {entry} cannot be used ({reason}); compiling into {directory}, a temporary "
            f"directory, from scratch. Fix or remove it (or set ${INDUCTOR_ENV_VAR}) to keep compiles",
            file=err or sys.stderr,
        )
        os.environ[INDUCTOR_ENV_VAR] = _ours = directory
        return CompileCache(directory, key, "private", reason)
    state = "warm" if any(entry.iterdir()) else "cold"
    os.environ[INDUCTOR_ENV_VAR] = _ours = str(entry)
    return CompileCache(str(entry), key, state)


def compile_counters() -> dict[str, Any]:
    """This process's compiles so far: cache hits and misses (FX graphs, AOTAutograd) and ``compile_s``, the
    seconds Dynamo spent compiling frames (tracing, AOTAutograd, Inductor, or loading them from the cache)
    plus the backward graphs AOTAutograd compiled lazily: what a record says of a compile."""
    from torch._dynamo.utils import compilation_time_metrics, counters  # here: Dynamo loads only once asked

    wanted = ("fxgraph_cache_hit", "fxgraph_cache_miss", "autograd_cache_hit", "autograd_cache_miss")
    merged = {**counters["inductor"], **counters["aot_autograd"]}
    seconds = sum(
        sum(times)
        for name, times in compilation_time_metrics.items()
        if name == "_compile.compile_inner" or "bw_compiler" in name
    )
    return {**{name: int(merged.get(name, 0)) for name in wanted}, "compile_s": round(seconds, 3)}
