"""Kept public path: ``andrea_lab.testing`` re-exports :mod:`andrea_lab.plugins.testing`, the test kit.

The tests that ``andrea new-plugin`` writes, and every plugin package written before the plugin system
moved into ``andrea_lab/plugins/``, import ``check_activation``, ``check_placement``, ``check_backend``,
``check_norm``, ``RecordingBackend``, ``write_distribution`` and ``forget_modules`` from here; they are
the new module's own objects. The pytest plugin is :mod:`andrea_lab.testing.pytest_plugin` (kept too).
"""

from andrea_lab.plugins.testing import (RecordingBackend, check_activation, check_backend, check_norm, check_placement,
                                        forget_modules, write_distribution)

__all__ = ["RecordingBackend", "check_activation", "check_backend", "check_norm", "check_placement",
           "forget_modules", "write_distribution"]
