"""The plugin system, in one package: what a plugin must provide, how one is found, run and checked.

* :mod:`~andrea_lab.plugins.contracts` — the interfaces (base classes, ``Availability``, the contract
  version): the whole of what andrea-lab and a plugin agree on.
* :mod:`~andrea_lab.plugins.registry` — discovery through the ``andrea_lab.*`` entry-point groups,
  selection by name, listing, and the errors that name what is wrong.
* :mod:`~andrea_lab.plugins.guard` — a plugin that raises inside the model is reported by name.
* :mod:`~andrea_lab.plugins.check` — the behaviour checks behind ``andrea plugins --check``.
* :mod:`~andrea_lab.plugins.builtin` — andrea-lab's own plugins, registered like anyone else's.
* :mod:`~andrea_lab.plugins.testing` — the test kit and pytest plugin for plugin authors.

The old top-level modules that third-party plugins import (the contracts, the registry, the test kit
and its pytest plugin, the reference backend) are kept as thin re-exports of the modules here, so a
plugin written before the move runs unchanged; tests/plugins/test_kept_paths.py lists them and holds
each name to be the same object as here.

This ``__init__`` imports nothing, so importing one module of the package never loads the others.
"""
