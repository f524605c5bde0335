"""Import an optimizer's optional package, or say in one line which extra installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from andrea_lab.errors import UsageError

#: The pyproject extra that installs the optimizers' optional packages.
EXTRA = "optimizers"


class MissingOptimizerPackage(UsageError):
    """An optimizer plugin's package is not installed; the message names the pip command."""


def require(module: str, package: str, optimizer: str) -> ModuleType:
    """``import module``, or :class:`MissingOptimizerPackage` naming ``package`` and the extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingOptimizerPackage(
            f"optimizer {optimizer!r} needs the package {package!r}, which is not installed: "
            f"pip install 'andrea-lab[{EXTRA}]' (or pip install {package})"
        ) from exc
