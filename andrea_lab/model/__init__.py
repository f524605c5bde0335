"""What ANDREA is: its configuration, the transformer, and the plugin system its parts come from.

* :mod:`~andrea_lab.model.config` -- ``AndreaConfig``, a frozen dataclass of names and numbers, and the presets;
* :mod:`~andrea_lab.model.transformer` -- ``Andrea``: embeddings, blocks, final norm, tied head;
* :mod:`~andrea_lab.model.softcap` -- the attention options that are numbers, not plugins;
* :mod:`~andrea_lab.model.contracts` -- what a norm placement, activation, kernel backend or norm provides;
* :mod:`~andrea_lab.model.registry` -- discovery through the ``andrea_lab.*`` entry-point groups, by name;
* :mod:`~andrea_lab.model.plugin_check` -- the behaviour checks behind ``andrea plugins --check``;
* :mod:`~andrea_lab.model.builtin` -- andrea-lab's own plugins, registered like anyone else's.

Plugin authors import :mod:`andrea_lab.plugin`, the one front door over these modules.
"""

import importlib

__all__ = ["Andrea", "AndreaConfig", "ConfigError", "preset"]

#: Imported on first use: ``import andrea_lab.model.registry`` (``andrea plugins``) must not build torch modules.
_LAZY = {
    "Andrea": "andrea_lab.model.transformer",
    "AndreaConfig": "andrea_lab.model.config",
    "ConfigError": "andrea_lab.model.config",
    "preset": "andrea_lab.model.config",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'andrea_lab.model' has no attribute {name!r}")
