"""The pytest plugin of :mod:`andrea_lab.plugin.testing`, registered as a ``pytest11`` entry point, so any
test session in an environment with andrea-lab installed has these fixtures and the ``gpu`` marker.

Fixtures:
    make_distribution: ``make_distribution(name, version="1.0", entry_points={group: {name: "mod:Attr"}},
        files={"mod.py": source})`` installs a throwaway distribution for this test only (a directory put
        first on ``sys.path``); the modules it imported and the registry's cache are forgotten afterwards.
    isolated_plugins: plugin discovery sees andrea-lab's built-ins, what ``make_distribution`` installs,
        and the distributions named in the ini option ``andrea_keep_plugins`` — nothing else installed.
    fresh_registry: the registry's cache is cleared before and after the test (needed whenever a test
        installs, removes or re-imports a plugin in-process: resolution is cached).
    recording_backend: a fresh :class:`~andrea_lab.plugin.testing.RecordingBackend`.

Marker ``gpu``: the test needs a CUDA device and is skipped without one, with the reason; with the
environment variable ``ANDREA_REQUIRE_GPU=1``, a skipped ``gpu`` test fails instead.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest

REQUIRE_GPU_ENV_VAR = "ANDREA_REQUIRE_GPU"


def require_gpu() -> bool:
    return os.environ.get(REQUIRE_GPU_ENV_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "andrea_keep_plugins",
        type="linelist",
        default=[],
        help="plugin distributions the isolated_plugins fixture keeps visible (e.g. the package under test)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"gpu: needs a CUDA device (skipped without one; {REQUIRE_GPU_ENV_VAR}=1 makes that skip a failure)"
    )


def _no_gpu_reason() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    reason = _no_gpu_reason() if gpu_items else None
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and require_gpu() and item.get_closest_marker("gpu") and not hasattr(report, "wasxfail"):
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        # Reported as an error when the skip came from setup (a marker), as a failure from the test body.
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_GPU_ENV_VAR}=1, but this gpu test was skipped: {why.removeprefix('Skipped: ')}"


@pytest.fixture
def fresh_registry():
    from andrea_lab.model import registry  # torch: only for a test that uses the fixture

    registry.clear_cache()
    yield
    registry.clear_cache()


@pytest.fixture
def make_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry):
    # torch: loaded only by a test that uses the fixture, not by every pytest run where andrea-lab is installed
    from andrea_lab.model import registry
    from andrea_lab.plugin.testing import forget_modules, write_distribution

    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    written: set[str] = set()

    def make(
        name: str,
        version: str = "1.0",
        entry_points: dict[str, dict[str, str]] | None = None,
        files: dict[str, str] | None = None,
    ) -> Path:
        top_level = {Path(relative).parts[0].removesuffix(".py") for relative in (files or {})}
        written.update(top_level)
        forget_modules(top_level)
        dist_info = write_distribution(site, name, version, entry_points, files)
        registry.clear_cache()
        return dist_info

    yield make
    forget_modules(written)


@pytest.fixture
def isolated_plugins(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    fresh_registry,
) -> None:
    from packaging.utils import canonicalize_name

    from andrea_lab.model import registry  # torch: only for a test that uses the fixture

    test_root = tmp_path_factory.getbasetemp().resolve()
    keep = {"andrea-lab", *(canonicalize_name(name) for name in request.config.getini("andrea_keep_plugins"))}
    discover = metadata.distributions

    def visible(dist: metadata.Distribution) -> bool:
        if canonicalize_name(dist.metadata["Name"] or "") in keep:
            return True
        if not any(ep.group.startswith("andrea_lab.") for ep in dist.entry_points):
            return True
        return Path(dist.locate_file("")).resolve().is_relative_to(test_root)

    def distributions(**kwargs):
        return (dist for dist in discover(**kwargs) if visible(dist))

    # importlib.metadata.entry_points() looks this function up at each call.
    monkeypatch.setattr(metadata, "distributions", distributions)
    registry.clear_cache()


@pytest.fixture
def recording_backend():
    from andrea_lab.plugin.testing import RecordingBackend  # torch: only for a test that uses the fixture

    return RecordingBackend()
