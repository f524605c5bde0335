"""Installing plugin distributions for real, inside a test, so that ``importlib.metadata`` finds them.

:func:`write_distribution` writes what an installer leaves in site-packages: the module files and a
``<name>-<version>.dist-info/`` directory with ``METADATA`` and ``entry_points.txt``. The
``make_distribution`` fixture does that into a per-test directory put first on ``sys.path``, and
undoes everything afterwards (path, imported modules, the registry's cache). ``isolated_plugins``
hides the plugin distributions installed in the environment other than andrea-lab itself, so that a
test sees a known set of plugins.

Use it from a test module with ``from plugin_fixtures import make_distribution  # noqa: F401``
(pytest then sees the fixture), or call :func:`write_distribution` directly.
"""

from __future__ import annotations

import importlib
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Callable

import pytest

from andrea_lab import registry


def write_distribution(root: Path, name: str, version: str = "1.0",
                       entry_points: dict[str, dict[str, str]] | None = None,
                       files: dict[str, str] | None = None) -> Path:
    """Write an installed distribution into ``root`` (a directory on ``sys.path``); return its dist-info.

    ``entry_points`` maps a group (``andrea_lab.activation``, or just ``activation``) to
    ``{name: "module:Attr"}``; ``files`` maps paths relative to ``root`` to their source text.
    """
    root.mkdir(parents=True, exist_ok=True)
    for relative, text in (files or {}).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    dist_info = root / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    sections = []
    for group, names in (entry_points or {}).items():
        group = group if group.startswith("andrea_lab.") else f"andrea_lab.{group}"
        sections.append(f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in names.items()))
    (dist_info / "entry_points.txt").write_text("\n".join(sections))
    return dist_info


def forget_modules(names: set[str]) -> None:
    """Drop modules (and their submodules) from ``sys.modules`` so the next import reads the files again."""
    for loaded in list(sys.modules):
        if loaded.split(".")[0] in names:
            del sys.modules[loaded]


def _top_level_modules(files: dict[str, str]) -> set[str]:
    return {Path(relative).parts[0].removesuffix(".py") for relative in files}


@pytest.fixture
def make_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``make_distribution(name, version="1.0", entry_points={group: {name: "mod:Attr"}}, files={"mod.py": ...})``.

    Every distribution made in one test shares one directory, prepended to ``sys.path``.
    """
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    written: set[str] = set()

    def make(name: str, version: str = "1.0", entry_points: dict[str, dict[str, str]] | None = None,
             files: dict[str, str] | None = None) -> Path:
        files = files or {}
        written.update(_top_level_modules(files))
        forget_modules(_top_level_modules(files))
        dist_info = write_distribution(site, name, version, entry_points, files)
        importlib.invalidate_caches()
        registry.clear_cache()
        return dist_info

    registry.clear_cache()
    yield make
    forget_modules(written)
    registry.clear_cache()


@pytest.fixture
def isolated_plugins(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Make plugin discovery see andrea-lab's built-ins and what the tests install, nothing else.

    Other plugin distributions installed in the environment (a CUDA backend, the example package,
    one half-installed by a parallel job) would otherwise change what a test sees: its listing, its
    warnings, strict mode. Distributions that register no ``andrea_lab.*`` entry point are left
    alone, and discovery is still the real ``importlib.metadata`` scan of ``sys.path``.
    """
    test_root = tmp_path_factory.getbasetemp().resolve()
    discover = metadata.distributions

    def visible(dist: metadata.Distribution) -> bool:
        if _normalise(dist.metadata["Name"] or "") == "andrea-lab":
            return True
        if not any(ep.group.startswith("andrea_lab.") for ep in dist.entry_points):
            return True
        return Path(dist.locate_file("")).resolve().is_relative_to(test_root)

    def distributions(**kwargs):
        return (dist for dist in discover(**kwargs) if visible(dist))

    # importlib.metadata.entry_points() looks this function up at each call.
    monkeypatch.setattr(metadata, "distributions", distributions)
    registry.clear_cache()
    yield
    registry.clear_cache()


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
