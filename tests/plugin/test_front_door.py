"""``andrea_lab.plugin`` is the one import of a plugin package, and the module paths of release 0.1 still load.

* Every name of the front door is the very object of the module that defines it, and its ``__all__`` is the
  documented list (docs/plugins.md).
* The example plugin, the CUDA plugin (sources and tests) and every file ``andrea new-plugin`` writes import
  nothing of andrea-lab but ``andrea_lab.plugin``.
* The old paths (``andrea_lab.contracts``, ``.registry``, ``.builtin``, ``.testing``, ...) import the new module
  itself and warn with a DeprecationWarning naming the new import, pointing at the importing line; a plugin
  package written against them loads and trains; andrea-lab's own modules use none of them.
"""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from andrea_testing import MICRO_OVERRIDES
from import_graph import PACKAGE, imported_modules, module_names

from andrea_lab import _moved, plugin
from andrea_lab.cli import main
from andrea_lab.commands import new_plugin

pytest_plugins = ["pytester"]
REPO = PACKAGE.parent
IMPORT = re.compile(r"^\s*(?:from\s+(andrea_lab(?:\.\w+)*)\s+import|import\s+(andrea_lab(?:\.\w+)*))", re.MULTILINE)
#: The paths of 0.1 that plugin packages imported, and where their code is now.
PLUGIN_PATHS = {
    "andrea_lab.contracts": "andrea_lab.model.contracts",
    "andrea_lab.registry": "andrea_lab.model.registry",
    "andrea_lab.builtin": "andrea_lab.model.builtin",
    "andrea_lab.builtin.backends": "andrea_lab.model.builtin.backends",
    "andrea_lab.testing": "andrea_lab.plugin",  # a package, so that .pytest_plugin below it imports too
    "andrea_lab.testing.pytest_plugin": "andrea_lab.plugin.pytest_plugin",
}


def test_every_front_door_name_is_the_defining_modules_own_object():
    assert len(plugin.__all__) == len(set(plugin.__all__)) >= 30 and dir(plugin) == sorted(plugin.__all__)
    for name in plugin.__all__:
        value = getattr(plugin, name)
        home = sys.modules[getattr(value, "__module__", None) or ""] if hasattr(value, "__module__") else None
        if home is not None and home.__name__.startswith("andrea_lab."):
            assert getattr(home, name) is value, name
    assert plugin.TorchBackend.__module__ == "andrea_lab.model.builtin.backends"
    assert plugin.check_activation.__module__ == "andrea_lab.plugin.testing"
    with pytest.raises(AttributeError, match="andrea_lab.plugin"):
        plugin.no_such_name  # noqa: B018


def test_the_front_door_lists_what_docs_plugins_md_documents():
    documented = set(
        re.findall(
            r"`(\w+)`",
            (REPO / "docs" / "plugins.md")
            .read_text(encoding="utf-8")
            .split("## The one import", 1)[1]
            .split("\n\n**Paths of release 0.1.**")[0],
        )
    )
    assert set(plugin.__all__) <= documented, sorted(set(plugin.__all__) - documented)


def plugin_package_sources() -> dict[str, str]:
    """The bundled plugins' sources and tests, and every file the new-plugin template writes."""
    sources = {
        str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
        for path in sorted((REPO / "plugins").glob("andrea-lab-*/**/*.py"))
    }
    for table in (new_plugin.CLASSES, new_plugin.TESTS):
        sources.update({f"new-plugin {kind}": textwrap.dedent(text) for kind, text in table.items()})
    return sources


def deeper_imports(sources: dict[str, str]) -> dict[str, set[str]]:
    """Each source's imports of andrea-lab other than the front door."""
    found = {}
    for where, text in sources.items():
        imported = {module or plain for module, plain in IMPORT.findall(text)} - {"andrea_lab.plugin"}
        if imported:
            found[where] = imported
    return found


def test_plugin_packages_import_only_the_front_door():
    sources = plugin_package_sources()
    assert len(sources) > 15 and any("andrea_lab.plugin" in text for text in sources.values())
    assert deeper_imports(sources) == {}


def test_the_check_sees_a_deeper_import_however_it_is_written():
    assert deeper_imports(
        {
            "a": "from andrea_lab.plugin import Activation\n",
            "b": "import andrea_lab\n",
            "c": "    from andrea_lab.model.contracts import Norm\n",
            "d": "import andrea_lab.plugin\n",
            "e": "from andrea_lab import plugin\n",
        }
    ) == {"b": {"andrea_lab"}, "c": {"andrea_lab.model.contracts"}, "e": {"andrea_lab"}}


def _import_fresh(old: str):
    """Import ``old`` as a plugin package would, the first time in this process; the warnings it gave."""
    for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
        del sys.modules[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old, new", sorted(PLUGIN_PATHS.items()))
def test_an_old_plugin_path_is_the_new_module_and_warns_naming_the_front_door(old, new):
    module, caught = _import_fresh(old)
    assert module is importlib.import_module(new)
    assert [str(w.message) for w in caught if old + " moved" in str(w.message)] == [
        f"{old} moved; import from andrea_lab.plugin instead (the one import for plugin packages, "
        "docs/plugins.md). The old path goes in the next release."
    ]


def test_every_old_module_path_still_imports_its_new_module():
    for short, new in _moved.MOVED.items():
        module, caught = _import_fresh("andrea_lab." + short)
        assert module is importlib.import_module("andrea_lab." + new)
        assert any(f"andrea_lab.{short} moved" in str(w.message) for w in caught)
    module, _ = _import_fresh("andrea_lab.loggers")
    assert module.AndreaTensorBoardLogger.__module__ == "andrea_lab.fit.loggers"  # saved configs name this path


def test_the_warning_points_at_the_importing_line(tmp_path, monkeypatch):
    (tmp_path / "old_style_plugin.py").write_text("from andrea_lab.contracts import Activation\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("andrea_lab.contracts", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.import_module("old_style_plugin")
    sys.modules.pop("old_style_plugin", None)
    (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert (Path(warning.filename).name, warning.lineno) == ("old_style_plugin.py", 1)


def test_the_finder_answers_only_for_moved_paths():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("andrea_lab.no_such_module")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an import of a current path never warns
        importlib.import_module("andrea_lab.model.contracts")
    assert "andrea_lab.model" not in {"andrea_lab." + old for old in _moved.MOVED}  # a current package, not an alias


OLD_PLUGIN = '''
from andrea_lab.contracts import Activation


class OldCube(Activation):
    """Written against andrea-lab 0.1's paths."""

    contract_version = 1
    description = "x ** 3, from a plugin of 0.1"

    def forward(self, h):
        return h ** 3
'''


@pytest.mark.slow  # a real fit, a few seconds
def test_a_plugin_written_against_the_old_paths_still_trains(make_distribution, text_corpus, tmp_path, monkeypatch):
    make_distribution(
        "andrea-lab-old-cube",
        "0.1",
        entry_points={"activation": {"old_cube": "old_cube:OldCube"}},
        files={"old_cube.py": OLD_PLUGIN},
    )
    sys.modules.pop("andrea_lab.contracts", None)
    monkeypatch.chdir(tmp_path)
    with pytest.warns(DeprecationWarning, match=r"andrea_lab\.contracts moved; import from andrea_lab\.plugin"):
        code = main(
            [
                "fit",
                "--config",
                str(REPO / "experiments" / "quickstart.yaml"),
                *MICRO_OVERRIDES,
                "--data.corpus",
                str(text_corpus),
                "--model.config.activation",
                "old_cube",
                "--trainer.max_steps",
                "3",
                "--heldout.enabled",
                "false",
            ]
        )
    assert code == 0
    (run_dir,) = (tmp_path / "runs").glob("*/version_0")
    assert "activation: old_cube" in (run_dir / "config.yaml").read_text()
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 3


def test_andrea_lab_itself_imports_no_old_path():
    names = module_names(PACKAGE)
    known = set(names) | {"andrea_lab." + old for old in _moved.MOVED}
    found = {
        name: {m for m in imported_modules(name, path, known) if m[len("andrea_lab.") :] in _moved.MOVED}
        for name, path in names.items()
    }
    assert {name: old for name, old in found.items() if old} == {}


@pytest.mark.slow  # a pytest subprocess (a few seconds)
def test_the_old_pytest_plugin_path_loads_the_fixtures_with_autoloading_off(pytester, monkeypatch):
    pytester.makepyfile(
        test_uses_the_kit="""
        import pytest

        def test_fixture(recording_backend, make_distribution):
            recording_backend.relu(__import__("torch").ones(2))
            assert recording_backend.calls == ["relu"]

        @pytest.mark.gpu
        def test_marker():
            pass
    """
    )
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess(
        "-p",
        "andrea_lab.testing.pytest_plugin",
        "--strict-markers",
        "-p",
        "no:cacheprovider",
        "-W",
        "default::DeprecationWarning",
    )
    cuda = torch.cuda.is_available()  # the gpu marker is known (strict) and skips without a device
    result.assert_outcomes(passed=1 + cuda, skipped=0 if cuda else 1)
