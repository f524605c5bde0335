"""Shared fixtures: a small real-text corpus and an isolated cache, so tests never touch ~/.cache."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest


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
