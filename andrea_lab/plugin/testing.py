"""A test kit for plugin authors, installed with andrea-lab (no copying from this repository's tests).

In a plugin package's tests::

    from andrea_lab.plugin.testing import check_activation

    def test_my_activation_keeps_the_contract():
        check_activation(MyActivation)        # or the registered name: check_activation("my_act")

What it provides:

* :func:`check_activation`, :func:`check_placement`, :func:`check_backend`, :func:`check_norm` — the
  behaviour checks of ``andrea plugins --check`` as assertions: the class alone on small tensors (shapes,
  finiteness, gradients, a gated activation's widths, a backend's ops and gradients against the eager
  reference, a norm at a d_model and a head width)
  and in a micro model, alone and with each built-in of the other kinds. ``check_backend`` skips the
  test (with the backend's reason) when ``availability()`` says no.
* :func:`check_optimizer`, :func:`check_schedule` -- an optimizer trains a micro model, changes nothing in a
  step without gradients (the non-finite skip), resumes bit for bit from its ``state_dict`` and gives the
  training weights back after ``evaluation_weights``; a schedule is a pure, finite, non-negative multiplier.
  Both must declare every option of their own (``options``: an :class:`~andrea_lab.plugin.Option` per
  constructor keyword, its default inside its range) and work at each closed end of each declared range.
* :class:`RecordingBackend` — the eager reference backend, recording which ops were called, to assert
  that a plugin computes through its backend (so that a faster backend is actually used).
* :func:`write_distribution` / :func:`forget_modules` — install a throwaway distribution with entry
  points into a directory on ``sys.path``.
* The pytest plugin (:mod:`andrea_lab.plugin.pytest_plugin`, loaded automatically through the
  ``pytest11`` entry point) adds the fixtures ``make_distribution``, ``isolated_plugins``,
  ``fresh_registry`` and ``recording_backend``, and the ``gpu`` marker: such a test is skipped without
  a CUDA device, and with ``ANDREA_REQUIRE_GPU=1`` that skip is a failure (for a GPU CI job, where a
  silently skipped GPU test would pass for the wrong reason).
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
from pathlib import Path

import pytest

from andrea_lab.errors import AndreaError
from andrea_lab.model import plugin_check
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.contracts import KernelBackend
from andrea_lab.model.import_paths import allow_import_paths
from andrea_lab.model.registry import resolve

__all__ = [
    "RecordingBackend",
    "check_activation",
    "check_backend",
    "check_norm",
    "check_optimizer",
    "check_placement",
    "check_schedule",
    "forget_modules",
    "write_distribution",
]


def write_distribution(
    root: Path,
    name: str,
    version: str = "1.0",
    entry_points: dict[str, dict[str, str]] | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """Write an installed distribution into ``root`` (a directory on ``sys.path``); return its dist-info.

    ``entry_points`` maps a group (``andrea_lab.activation``, or just ``activation``) to
    ``{name: "module:Attr"}``; ``files`` maps paths relative to ``root`` to their source text. This is
    what an installer leaves in site-packages, so ``importlib.metadata`` finds it like any other.
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
    importlib.invalidate_caches()
    return dist_info


def forget_modules(names: set[str]) -> None:
    """Drop modules (and their submodules) from ``sys.modules`` so the next import reads the files again."""
    for loaded in list(sys.modules):
        if loaded.split(".")[0] in names:
            del sys.modules[loaded]


class RecordingBackend(TorchBackend):
    """The eager reference backend, recording the name of every op called on it, in order, in ``calls``
    (an op that calls another, like ``add_layer_norm`` → ``layer_norm``, records only itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self._depth = 0

    def _record(self, op: str, *args, **kwargs):
        if self._depth == 0:
            self.calls.append(op)
        self._depth += 1
        try:
            return getattr(super(), op)(*args, **kwargs)
        finally:
            self._depth -= 1

    def layer_norm(self, x, weight, bias, eps):
        return self._record("layer_norm", x, weight, bias, eps)

    def add_layer_norm(self, x, delta, weight, bias, eps):
        return self._record("add_layer_norm", x, delta, weight, bias, eps)

    def rms_norm(self, x, weight, eps):
        return self._record("rms_norm", x, weight, eps)

    def gelu_tanh(self, x):
        return self._record("gelu_tanh", x)

    def relu(self, x):
        return self._record("relu", x)

    def swiglu(self, gate, up):
        return self._record("swiglu", gate, up)


def _plugin(kind: str, plugin: type | str) -> tuple[type, str]:
    """The class and a name that selects it (a registered name, or the class's import path)."""
    if isinstance(plugin, str):
        return resolve(kind, plugin), plugin
    return plugin, f"{plugin.__module__}:{plugin.__qualname__}"


def _selecting(plugin: type | str):
    """A class handed to the kit is selected in the micro models by its import path: its module is
    already imported, so following that path (which the registry only does on opt-in) runs nothing new."""
    return allow_import_paths() if not isinstance(plugin, str) else contextlib.nullcontext()


def _assert(check, *args, **kwargs) -> None:
    try:
        check(*args, **kwargs)
    except AndreaError as exc:  # raised by the model around the plugin: still this plugin's failure
        raise plugin_check.CheckFailed(str(exc)) from exc


def _check_module(kind: str, check, plugin: type | str, backend: KernelBackend | None, in_models: bool) -> None:
    """An activation, placement or norm: alone through ``check``, then (``in_models``) in micro models."""
    cls, name = _plugin(kind, plugin)
    with plugin_check.one_thread():
        _assert(check, cls, backend)
        if in_models:
            with _selecting(plugin):
                _assert(plugin_check.check_in_models, kind, name)


def check_activation(plugin: type | str, backend: KernelBackend | None = None, in_models: bool = True) -> None:
    """Assert that an activation (class or registered name) keeps the contract when run (see module doc)."""
    _check_module("activation", plugin_check.check_activation, plugin, backend, in_models)


def check_placement(plugin: type | str, backend: KernelBackend | None = None, in_models: bool = True) -> None:
    """Assert that a norm placement (class or registered name) keeps the contract when run."""
    _check_module("norm_placement", plugin_check.check_placement, plugin, backend, in_models)


def check_norm(plugin: type | str, backend: KernelBackend | None = None, in_models: bool = True) -> None:
    """Assert that a norm (class or registered name) keeps the contract when run: alone at a d_model and
    a head width, then as every norm of micro models (with each built-in placement, and with qk_norm)."""
    _check_module("norm", plugin_check.check_norm, plugin, backend, in_models)


def check_backend(plugin: type | str, rtol: float = 1e-4, atol: float = 1e-5, in_models: bool = True) -> None:
    """Assert that a kernel backend (class or registered name) matches the eager reference, op by op
    and gradient by gradient, on the GPU when there is one; skip the test when it is unavailable here."""
    cls, name = _plugin("kernel_backend", plugin)
    with plugin_check.one_thread():
        try:
            _assert(plugin_check.check_backend, cls, rtol=rtol, atol=atol)
        except plugin_check.Unavailable as exc:
            pytest.skip(f"kernel backend {name!r} is not available here: {exc}")
        if in_models:
            with _selecting(plugin):
                _assert(plugin_check.check_in_models, "kernel_backend", name)


def check_optimizer(plugin: type | str) -> None:
    """Assert that an optimizer (class or registered name) keeps the contract when it trains, its declared
    options included (see module doc)."""
    cls, _ = _plugin("optimizer", plugin)
    with plugin_check.one_thread():
        _assert(plugin_check.check_optimizer, cls)


def check_schedule(plugin: type | str) -> None:
    """Assert that a learning-rate schedule (class or registered name) is a pure, finite, non-negative multiplier,
    also at the ends of its declared options' ranges."""
    cls, _ = _plugin("schedule", plugin)
    _assert(plugin_check.check_schedule, cls)
