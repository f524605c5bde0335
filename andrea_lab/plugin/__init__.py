"""The one front door for plugin authors: everything a plugin package imports from andrea-lab.

A plugin package writes ``from andrea_lab.plugin import Activation`` (and so on) and nothing deeper; the
modules behind these names (``andrea_lab.model.contracts``, ``.registry``, ``.builtin``, the test kit in
``andrea_lab.plugin.testing``) may move between releases, this list does not. docs/plugins.md walks through it.

* **Contracts** -- the base classes a plugin subclasses (``NormPlacement``, ``Activation``, ``KernelBackend``,
  ``Norm``, with ``NormFactory`` and the eager ``LayerNorm``; for training, ``Optimizer`` and ``Schedule`` with
  ``PARAMETER_ROLES``, ``TRAINING_KINDS`` and ``Option``, the declaration of each of their own options),
  ``Availability`` for a backend's ``availability()``, ``CONTRACT_VERSION``, ``PLUGIN_KINDS``, ``BACKEND_OPS``
  and ``eager_fallbacks``.
* **Eager references** -- ``TorchBackend``, the backend every op of another backend is compared against.
* **The registry, read-only** -- ``resolve``, ``list_plugins``, ``clear_cache`` and the errors a lookup raises.
* **The model** -- ``Andrea``, ``AndreaConfig``, ``preset``, ``ConfigError``: build a model with your plugin.
* **The test kit** (imports pytest, so loaded on first use) -- ``check_activation``, ``check_placement``,
  ``check_backend``, ``check_norm``, ``check_optimizer``, ``check_schedule``, ``RecordingBackend``,
  ``write_distribution``, ``forget_modules``, ``require_gpu`` and ``REQUIRE_GPU_ENV_VAR``; its fixtures come
  with the ``pytest11`` plugin.
* **Files** -- ``atomic_write``, for a plugin that caches what it builds (the CUDA plugin's compiled library).
"""

import importlib

from andrea_lab.files import atomic_write
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.contracts import (
    BACKEND_OPS,
    CONTRACT_VERSION,
    PLUGIN_KINDS,
    Activation,
    Availability,
    KernelBackend,
    LayerNorm,
    Norm,
    NormFactory,
    NormPlacement,
    eager_fallbacks,
)
from andrea_lab.model.plugin_options import Option
from andrea_lab.model.registry import (
    BackendUnavailableError,
    PluginError,
    PluginInfo,
    PluginRuntimeError,
    UnregisteredPluginError,
    clear_cache,
    list_plugins,
    resolve,
)
from andrea_lab.model.training_contracts import PARAMETER_ROLES, TRAINING_KINDS, Optimizer, Schedule

#: Imported on first use: the kit needs pytest, the model a few hundred ms more than a plugin's own import.
_LAZY = {
    "Andrea": "andrea_lab.model.transformer",
    "AndreaConfig": "andrea_lab.model.config",
    "ConfigError": "andrea_lab.model.config",
    "preset": "andrea_lab.model.config",
    "check_activation": "andrea_lab.plugin.testing",
    "check_placement": "andrea_lab.plugin.testing",
    "check_backend": "andrea_lab.plugin.testing",
    "check_norm": "andrea_lab.plugin.testing",
    "check_optimizer": "andrea_lab.plugin.testing",
    "check_schedule": "andrea_lab.plugin.testing",
    "RecordingBackend": "andrea_lab.plugin.testing",
    "write_distribution": "andrea_lab.plugin.testing",
    "forget_modules": "andrea_lab.plugin.testing",
    "require_gpu": "andrea_lab.plugin.pytest_plugin",
    "REQUIRE_GPU_ENV_VAR": "andrea_lab.plugin.pytest_plugin",
}

__all__ = [
    "Activation",
    "Andrea",
    "AndreaConfig",
    "Availability",
    "BACKEND_OPS",
    "BackendUnavailableError",
    "CONTRACT_VERSION",
    "ConfigError",
    "KernelBackend",
    "LayerNorm",
    "Norm",
    "NormFactory",
    "NormPlacement",
    "Optimizer",
    "Option",
    "PARAMETER_ROLES",
    "PLUGIN_KINDS",
    "PluginError",
    "PluginInfo",
    "PluginRuntimeError",
    "REQUIRE_GPU_ENV_VAR",
    "RecordingBackend",
    "Schedule",
    "TRAINING_KINDS",
    "TorchBackend",
    "UnregisteredPluginError",
    "atomic_write",
    "check_activation",
    "check_backend",
    "check_norm",
    "check_optimizer",
    "check_placement",
    "check_schedule",
    "clear_cache",
    "eager_fallbacks",
    "forget_modules",
    "list_plugins",
    "preset",
    "require_gpu",
    "resolve",
    "write_distribution",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'andrea_lab.plugin' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
