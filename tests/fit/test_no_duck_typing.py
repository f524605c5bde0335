"""Callbacks talk to the LightningModule through what it documents (``nonfinite.guard_of``: its
:class:`~andrea_lab.fit.nonfinite.NonFiniteGuard`), never by probing it with ``hasattr``: two parties that
coordinate by whether an attribute happens to exist break silently when one of them renames it."""

from __future__ import annotations

import ast
from pathlib import Path

CALLBACKS = Path(__file__).resolve().parents[2] / "andrea_lab" / "fit"  # the callbacks live in fit/ and fit/stability/
#: The names a Lightning hook gives the LightningModule, and ``trainer.lightning_module``.
MODULE_NAMES = {"pl_module", "module", "lightning_module"}


def _names_the_module(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in MODULE_NAMES
    return isinstance(node, ast.Attribute) and node.attr in MODULE_NAMES


def hasattr_on_the_module(source: str) -> list[int]:
    """The lines of ``hasattr(<the LightningModule>, ...)`` calls in ``source``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "hasattr"
        and node.args
        and _names_the_module(node.args[0])
    ]


def test_no_callback_calls_hasattr_on_the_lightning_module():
    files = sorted(CALLBACKS.rglob("*.py"))
    assert len(files) > 5
    found = {path.name: lines for path in files if (lines := hasattr_on_the_module(path.read_text(encoding="utf-8")))}
    assert found == {}


def test_the_check_sees_hasattr_on_the_module():
    source = (
        "def hook(trainer, pl_module, writer):\n"
        "    a = hasattr(pl_module, 'last_grad_norm')\n"
        "    b = hasattr(trainer.lightning_module, 'x')\n"
        "    c = hasattr(writer, 'add_custom_scalars')\n"
    )
    assert hasattr_on_the_module(source) == [2, 3]
