"""Shared fixtures: a small real-text corpus and an isolated cache, so tests never touch ~/.cache."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import pytest

from andrea_lab.experiments.sweep.executors import shared_threads


def _one_share_of_the_cores_per_worker() -> None:
    """Under pytest-xdist every worker's torch, and every ``andrea fit`` a test starts, would run one OpenMP
    thread per core: with two workers on two cores that is twice as many busy threads as cores, and OpenMP's
    spinning threads then wait on each other. tests/model + tests/data (not slow) at ``-n 2`` took 135 s with
    the default and 76 s with one thread per worker (2026-12-06, 2 cores beside a sweep). The variable reaches
    the fits the tests start; torch in this process is set as well, because the package's pytest plugin (an
    entry point, loaded before any conftest) has imported it already. The share is the sweep's own rule for
    fits run side by side (executors.shared_threads). A user's own OMP_NUM_THREADS wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or "1")
    share = shared_threads(workers)
    if share is None or "OMP_NUM_THREADS" in os.environ:
        return
    os.environ["OMP_NUM_THREADS"] = str(share)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(share)


_one_share_of_the_cores_per_worker()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """One default cache for the whole session, never ~/.cache (tokenizers built once are reused)."""
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path_factory.getbasetemp() / "andrea-cache"))


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory) -> Path:
    """About 200 KB of real Python source (a few standard-library modules) as a corpus directory."""
    root = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse.py", "textwrap.py", "string.py", "heapq.py", "bisect.py", "shlex.py"):
        (root / name).write_text((stdlib / name).read_text(encoding="utf-8"), encoding="utf-8")
    return root


@pytest.fixture
def import_paths(monkeypatch):
    """The documented opt-in (ANDREA_LAB_IMPORT_PATHS=1) that lets a plugin name be 'module:Class'."""
    monkeypatch.setenv("ANDREA_LAB_IMPORT_PATHS", "1")
