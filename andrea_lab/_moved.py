"""The module paths of andrea-lab 0.1 that moved when the package was grouped by job (issue 35), kept for
one release: ``import andrea_lab.contracts`` (or any old path below) still works, returns the module that
now holds the code, and warns with a DeprecationWarning naming the new import.

Third-party plugin packages import the old plugin paths (``andrea_lab.contracts``, ``.registry``,
``.builtin``, ``.testing``); saved ``config.yaml`` files name ``andrea_lab.loggers.AndreaTensorBoardLogger``
as a class path. Both keep loading. An alias is the very module object of the new path (not a copy), so
``isinstance`` checks, the registry's cache and ``mock.patch`` see one module.

A finder on ``sys.meta_path`` answers only for the names in :data:`MOVED`; every other import is untouched.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

#: Old path (below ``andrea_lab.``) -> new path. Plugin authors' paths point at the front door in the warning.
MOVED = {
    "analysis": "experiments.compare",
    "analysis.aa_calibration": "experiments.compare.aa_calibration",
    "analysis.attention_columns": "experiments.compare.attention_columns",
    "analysis.claims": "experiments.compare.claims",
    "analysis.compare": "experiments.compare.compare",
    "analysis.config_variants": "experiments.compare.config_variants",
    "analysis.divergence": "experiments.compare.divergence",
    "analysis.lens": "inside.lens",
    "analysis.lens_loss": "inside.lens_loss",
    "analysis.lens_plots": "inside.lens_plots",
    "analysis.multiplicity": "experiments.compare.multiplicity",
    "analysis.outputs": "experiments.compare.outputs",
    "analysis.params": "inside.params",
    "analysis.plots": "experiments.compare.plots",
    "analysis.plots_scales": "experiments.compare.plots_scales",
    "analysis.report": "experiments.compare.report",
    "analysis.runs_table": "experiments.compare.runs_table",
    "analysis.scales": "experiments.compare.scales",
    "analysis.scales_report": "experiments.compare.scales_report",
    "analysis.selection": "experiments.compare.selection",
    "analysis.stats": "experiments.compare.stats",
    "analysis.tensorboard_report": "experiments.compare.tensorboard_report",
    "analysis.trace": "inside.trace",
    "builtin": "model.builtin",
    "builtin.backends": "model.builtin.backends",
    "callbacks": "fit",
    "callbacks.checkpoint": "fit.checkpoint",
    "callbacks.events": "fit.stability.events",
    "callbacks.heldout": "fit.heldout",
    "callbacks.hparams": "fit.hparams",
    "callbacks.preemption": "fit.preemption",
    "callbacks.stability": "fit.stability.monitor",
    "callbacks.stability_layout": "fit.stability.layout",
    "callbacks.summary": "fit.summary",
    "callbacks.unigram": "fit.stability.unigram",
    "commands.lightning_cli": "fit.cli",
    "config": "model.config",
    "contracts": "model.contracts",
    "loggers": "fit.loggers",
    "module": "fit.module",
    "plugins": "model",
    "plugins.builtin": "model.builtin",
    "plugins.builtin.activations": "model.builtin.activations",
    "plugins.builtin.backends": "model.builtin.backends",
    "plugins.builtin.norms": "model.builtin.norms",
    "plugins.builtin.placements": "model.builtin.placements",
    "plugins.check": "model.plugin_check",
    "plugins.contracts": "model.contracts",
    "plugins.guard": "model.guard",
    "plugins.registry": "model.registry",
    "plugins.testing": "plugin",
    "plugins.testing.pytest_plugin": "plugin.pytest_plugin",
    "registry": "model.registry",
    "stability": "fit.stability",
    "stability.probe": "fit.stability.probe",
    "stability.softcap": "model.softcap",
    "stability.z_loss": "fit.z_loss",
    "sweep": "experiments.sweep",
    "sweep.executors": "experiments.sweep.executors",
    "sweep.plan": "experiments.sweep.plan",
    "sweep.preflight": "experiments.sweep.preflight",
    "sweep.ray_executor": "experiments.sweep.ray_executor",
    "sweep.runner": "experiments.sweep.runner",
    "sweep.scales": "experiments.sweep.scales",
    "sweep.suite": "experiments.sweep.suite",
    "sweep.suite_keys": "experiments.sweep.suite_keys",
    "sweep.tiny_suite": "experiments.sweep.tiny_suite",
    "sweep.warm_executor": "experiments.sweep.warm_executor",
    "sweep.warm_worker": "experiments.sweep.warm_worker",
    "testing": "plugin",
    "testing.pytest_plugin": "plugin.pytest_plugin",
    "training": "fit",
    "training.args": "fit.args",
    "training.initial_weights": "fit.initial_weights",
    "training.log_cadence": "fit.log_cadence",
    "training.nonfinite": "fit.nonfinite",
    "training.optim": "fit.optim",
    "training.rng_state": "fit.rng_state",
}

#: The paths a plugin package imports: their warning names the front door, ``andrea_lab.plugin``.
PLUGIN_AUTHOR_PATHS = {
    "contracts",
    "registry",
    "builtin",
    "builtin.backends",
    "testing",
    "testing.pytest_plugin",
    "plugins",
    "plugins.contracts",
    "plugins.registry",
    "plugins.testing",
    "plugins.builtin",
    "plugins.builtin.backends",
}
PREFIX = "andrea_lab."


def new_path(old: str) -> str:
    """The module that now holds what ``old`` (a full dotted path) held."""
    return PREFIX + MOVED[old[len(PREFIX) :]]


def advice(old: str) -> str:
    short = old[len(PREFIX) :]
    if short in PLUGIN_AUTHOR_PATHS:
        return (
            f"{old} moved; import from andrea_lab.plugin instead (the one import for plugin packages, "
            f"docs/plugins.md). The old path goes in the next release."
        )
    return f"{old} moved to {new_path(old)}; import that instead. The old path goes in the next release."


class _MovedLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # a placeholder module; exec_module puts the real one in its place

    def exec_module(self, module) -> None:
        old = module.__name__
        # stacklevel 2: the importing line; warnings skips importlib's own frames in between by itself
        warnings.warn(advice(old), DeprecationWarning, stacklevel=2)
        # importlib returns whatever sys.modules holds under the name after exec_module: the real module.
        sys.modules[old] = importlib.import_module(new_path(old))


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(PREFIX) and fullname[len(PREFIX) :] in MOVED:
            return importlib.machinery.ModuleSpec(fullname, _MovedLoader())
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): before the path finder, which would otherwise find
    an old name under a package that was aliased (``andrea_lab.callbacks.stability`` below ``fit/``)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
