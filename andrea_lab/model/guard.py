"""Failures inside a plugin, reported as one message that names the plugin, not as a raw traceback.

The model calls plugins in three places: their constructors (while it is built), ``availability()``
(before the backend is constructed) and their ``forward``/ops (every step). An exception there is
turned into a :class:`~andrea_lab.model.registry.PluginRuntimeError` naming the plugin, its distribution
and the exception (kept as ``__cause__``; ``ANDREA_LAB_DEBUG=1`` shows the traceback). Shapes a
plugin returns are checked where the model receives them (see ``andrea_lab.model.transformer``), so a gated
activation that forgot ``gated = True`` says so instead of failing in the next matmul.
"""

from __future__ import annotations

import contextlib
import traceback
from types import TracebackType
from typing import Iterator

from andrea_lab.model.contracts import PLUGIN_KINDS
from andrea_lab.errors import AndreaError
from andrea_lab.model.registry import PluginRuntimeError, describe_selection


@contextlib.contextmanager
def raised_by(kind: str, name: str, where: str) -> Iterator[None]:
    """Blame any exception in the block on the ``kind`` plugin ``name`` (``where``: "its constructor")."""
    try:
        yield
    except AndreaError:
        raise
    except Exception as exc:  # a plugin may raise anything; say whose it was
        raise failure(kind, name, where, exc) from exc


def failure(kind: str, name: str, where: str, exc: BaseException) -> PluginRuntimeError:
    return PluginRuntimeError(f"{describe_selection(kind, name)} raised in {where}: {type(exc).__name__}: {exc}")


def culprit(tb: TracebackType | None, plugins: dict[str, type], own: tuple[type, ...]) -> str | None:
    """The kind of the plugin whose method raised, from the innermost frame whose ``self`` is a plugin
    instance (``plugins``: kind → class) or one of the model's own modules (``own``: then None)."""
    for frame, _ in reversed(list(traceback.walk_tb(tb))):
        obj = frame.f_locals.get("self")
        if obj is None:
            continue
        for kind in PLUGIN_KINDS:
            if kind in plugins and isinstance(obj, plugins[kind]):
                return kind
        if isinstance(obj, own):
            return None
    return None


def shape_text(shape) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"
