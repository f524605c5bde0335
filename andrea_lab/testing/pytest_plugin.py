"""Kept public path: ``andrea_lab.testing.pytest_plugin`` re-exports :mod:`andrea_lab.plugins.testing.pytest_plugin`.

The ``pytest11`` entry point registers the new module, so a session with andrea-lab installed loads the
fixtures and the ``gpu`` marker once, from there. Plugin tests import ``REQUIRE_GPU_ENV_VAR`` and
``require_gpu`` from this path; and with plugin autoloading off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``),
``-p andrea_lab.testing.pytest_plugin`` still loads every hook and fixture, which are re-exported too.
"""

from andrea_lab.plugins.testing.pytest_plugin import (REQUIRE_GPU_ENV_VAR, fresh_registry, isolated_plugins,
                                                      make_distribution, pytest_addoption,
                                                      pytest_collection_modifyitems, pytest_configure,
                                                      pytest_runtest_makereport, recording_backend, require_gpu)

__all__ = ["REQUIRE_GPU_ENV_VAR", "fresh_registry", "isolated_plugins", "make_distribution", "pytest_addoption",
           "pytest_collection_modifyitems", "pytest_configure", "pytest_runtest_makereport", "recording_backend",
           "require_gpu"]
