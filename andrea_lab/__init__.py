"""andrea-lab: train ANDREA and compare its variants (norm placement, activation, MLP ratio,
kernel backend), each chosen by name through entry-point plugins."""

import importlib

from andrea_lab import _moved

__all__ = ["Andrea", "AndreaConfig", "ConfigError", "preset", "AndreaLM", "AndreaDataModule"]
__version__ = "0.1.0"

#: Every public name is imported on first use, so that ``import andrea_lab.<anything>`` does not pull in
#: torch or Lightning (seconds each): the tokenizer's worker processes and ``andrea plugins`` need neither.
_LAZY = {
    "Andrea": "andrea_lab.model.transformer",
    "AndreaConfig": "andrea_lab.model.config",
    "ConfigError": "andrea_lab.model.config",
    "preset": "andrea_lab.model.config",
    "AndreaLM": "andrea_lab.fit.module",
    "AndreaDataModule": "andrea_lab.data",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'andrea_lab' has no attribute {name!r}")


_moved.install()  # the module paths of 0.1 keep importing, with a DeprecationWarning
