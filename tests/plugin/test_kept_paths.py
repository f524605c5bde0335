"""The plugin system moved into andrea_lab/plugins/; the old paths that third-party plugins import stay.

Kept: exactly the modules the bundled plugins (plugins/andrea-lab-example, plugins/andrea-lab-cuda),
their tests and the package ``andrea new-plugin`` writes import -- each a thin re-export whose every
public name is the new module's own object. andrea-lab's own modules import the new paths only.
(This file names the old paths on purpose; /work/plugins-rewrite.sh leaves it alone.)
"""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from pathlib import Path

import pytest
import torch
from test_import_cycles import PACKAGE, imported_modules, module_names

from andrea_lab.commands import new_plugin

pytest_plugins = ["pytester"]
REPO = PACKAGE.parent
#: old path -> new path, for every module kept as a re-export.
KEPT = {
    "andrea_lab.contracts": "andrea_lab.plugins.contracts",
    "andrea_lab.registry": "andrea_lab.plugins.registry",
    "andrea_lab.testing": "andrea_lab.plugins.testing",
    "andrea_lab.testing.pytest_plugin": "andrea_lab.plugins.testing.pytest_plugin",
    "andrea_lab.builtin.backends": "andrea_lab.plugins.builtin.backends",
}
SHIMS = {*KEPT, "andrea_lab.builtin"}  # the package holding the kept backends module
#: Every module path the plugin system had before the move (kept or not).
OLD = ("andrea_lab.contracts", "andrea_lab.registry", "andrea_lab.plugin_guard", "andrea_lab.plugin_check",
       "andrea_lab.builtin", "andrea_lab.testing")
IMPORT = re.compile(r"^\s*(?:from\s+(andrea_lab(?:\.\w+)*)\s+import|import\s+(andrea_lab(?:\.\w+)+))", re.MULTILINE)


def public_names(module) -> set[str]:
    """Its ``__all__``, else the names its source binds at the top level without a leading underscore,
    leaving out what it imports from outside andrea_lab (``torch``, ``TYPE_CHECKING``, ``dataclass``)."""
    if hasattr(module, "__all__"):
        return set(module.__all__)
    names = set()
    for node in ast.parse(Path(module.__file__).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("andrea_lab"):
            names.update(alias.asname or alias.name for alias in node.names)
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("old, new", sorted(KEPT.items()))
def test_every_public_name_of_the_new_module_is_the_same_object_through_the_old_path(old, new):
    kept, moved = importlib.import_module(old), importlib.import_module(new)
    assert kept is not moved and Path(kept.__file__).is_relative_to(PACKAGE) and "plugins" not in old
    missing = sorted(public_names(moved) - set(dir(kept)))
    assert not missing, f"{old} does not re-export {missing} of {new}"
    assert set(kept.__all__) == public_names(moved), f"{old}.__all__ lists more than {new} has"
    differ = [name for name in public_names(moved) if getattr(kept, name) is not getattr(moved, name)]
    assert not differ, f"{old} holds other objects than {new} for {differ}"


def test_public_names_sees_a_name_the_old_path_would_miss():
    # So the test above can fail: a function added to the registry is found, an imported helper is not.
    registry = importlib.import_module("andrea_lab.plugins.registry")
    assert {"resolve", "PluginError", "KINDS", "Availability"} <= public_names(registry)
    assert not {"metadata", "dataclass", "canonicalize_name", "annotations"} & public_names(registry)
    assert "TYPE_CHECKING" not in public_names(importlib.import_module("andrea_lab.plugins.contracts"))


def _third_party_sources() -> dict[str, str]:
    """The bundled plugins' sources and tests, and every file the new-plugin template writes."""
    sources = {str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
               for path in sorted((REPO / "plugins").glob("andrea-lab-*/**/*.py"))}
    for table in (new_plugin.CLASSES, new_plugin.TESTS):
        sources.update({f"new-plugin {kind}": textwrap.dedent(text) for kind, text in table.items()})
    return sources


def test_every_old_path_third_parties_import_is_kept():
    imported = {module or plain for text in _third_party_sources().values() for module, plain in IMPORT.findall(text)}
    old = {module for module in imported if module.startswith(OLD)}
    assert {"andrea_lab.contracts", "andrea_lab.testing"} <= old, "the template and the example import these"
    assert old <= set(KEPT), f"imported by a plugin but not kept: {sorted(old - set(KEPT))}"


def old_path_imports(package: Path, skip: set[str]) -> dict[str, set[str]]:
    """Module -> the old plugin paths it imports (anywhere in its source), for the package's modules."""
    names = module_names(package)
    known = set(names) | set(OLD) | {f"{module}.{part}" for module in ("andrea_lab.builtin", "andrea_lab.testing")
                                     for part in ("activations", "backends", "norms", "placements", "pytest_plugin")}
    found = {}
    for name, path in names.items():
        if name in skip:
            continue
        old = {module for module in imported_modules(name, path, known) if module.startswith(OLD)}
        if old:
            found[name] = old
    return found


def test_andrea_lab_itself_imports_only_the_new_paths():
    assert old_path_imports(PACKAGE, skip=SHIMS) == {}


def test_the_check_sees_an_old_import_however_it_is_written(tmp_path):
    package = tmp_path / "andrea_lab"
    for name, text in {"__init__.py": "", "registry.py": "", "plugins/__init__.py": "", "plugins/registry.py": "",
                       "a.py": "from andrea_lab.registry import resolve\n",
                       "b.py": "def f():\n    from andrea_lab import plugin_check\n",
                       "c.py": "import andrea_lab.builtin.placements\n",
                       "d.py": "from andrea_lab.plugins.registry import resolve\nfrom . import plugins\n",
                       "e/__init__.py": "from .. import registry\n"}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    found = old_path_imports(package, skip={"andrea_lab.registry"})
    assert found == {"andrea_lab.a": {"andrea_lab.registry"}, "andrea_lab.b": {"andrea_lab.plugin_check"},
                     "andrea_lab.c": {"andrea_lab.builtin.placements"}, "andrea_lab.e": {"andrea_lab.registry"}}


@pytest.mark.slow  # a pytest subprocess (a few seconds)
def test_the_old_pytest_plugin_path_loads_the_fixtures_with_autoloading_off(pytester, monkeypatch):
    pytester.makepyfile(test_uses_the_kit="""
        import pytest

        def test_fixture(recording_backend, make_distribution):
            recording_backend.relu(__import__("torch").ones(2))
            assert recording_backend.calls == ["relu"]

        @pytest.mark.gpu
        def test_marker():
            pass
    """)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess("-p", "andrea_lab.testing.pytest_plugin", "--strict-markers",
                                           "-p", "no:cacheprovider")
    cuda = torch.cuda.is_available()  # the gpu marker is known (strict) and skips without a device
    result.assert_outcomes(passed=1 + cuda, skipped=0 if cuda else 1)
