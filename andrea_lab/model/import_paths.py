"""The opt-in that lets a plugin name be an import path ``module:Class`` (docs/plugins.md): for a class that
is not packaged yet. Off by default: a name from a config or a checkpoint must not import arbitrary modules."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

IMPORT_PATHS_ENV_VAR = "ANDREA_LAB_IMPORT_PATHS"
_import_paths_allowed = contextvars.ContextVar("andrea_import_paths_allowed", default=False)


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to a true value (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def import_paths_allowed() -> bool:
    """Whether a plugin name may be an import path (``ANDREA_LAB_IMPORT_PATHS=1`` or :func:`allow_import_paths`)."""
    return _import_paths_allowed.get() or env_flag(IMPORT_PATHS_ENV_VAR)


@contextlib.contextmanager
def allow_import_paths() -> Iterator[None]:
    """Follow import paths inside this block: for code that hands over a class it holds itself (the test
    kit checking a plugin before it is packaged), where importing its module runs nothing new."""
    token = _import_paths_allowed.set(True)
    try:
        yield
    finally:
        _import_paths_allowed.reset(token)
