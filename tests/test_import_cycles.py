"""No import cycle inside the package: not between modules, not between packages at any level.

A cycle hidden behind an import inside a function (``corpus.py`` <-> ``shards.py`` once was one) or behind
``if TYPE_CHECKING:`` still means neither side can be read, tested or changed without the other, so every
import counts here (tests/import_graph.py reads them from the sources). Packages: at each level, the
direct children of a package (its modules, each subpackage taken whole) import each other without a cycle
-- ``andrea_lab.data`` <-> ``andrea_lab.runs`` was one while each module pair was acyclic.
"""

from __future__ import annotations

from pathlib import Path

from import_graph import PACKAGE, cycles, import_graph, imported_modules, module_names, package_graph

__all__ = ["PACKAGE", "imported_modules", "module_names"]  # tests/plugin reads the graph through these too


def packages(package: Path) -> list[str]:
    return sorted(name for name, path in module_names(package).items() if path.name == "__init__.py")


def test_the_package_has_no_module_cycle():
    graph = import_graph(PACKAGE)
    assert "andrea_lab.data.shards" in graph["andrea_lab.data.corpus"]  # the graph sees the package's imports
    assert [sorted(cycle) for cycle in cycles(graph)] == []


def test_no_package_imports_itself_through_another():
    graph = import_graph(PACKAGE)
    found = {name: [sorted(cycle) for cycle in cycles(package_graph(graph, name))] for name in packages(PACKAGE)}
    assert {name: cycle for name, cycle in found.items() if cycle} == {}
    assert "andrea_lab.model" in package_graph(graph, "andrea_lab")["andrea_lab.fit"]


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_check_sees_cycles_hidden_in_a_function_or_behind_type_checking(tmp_path):
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def thing():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "from . import a\nif TYPE_CHECKING:\n    from pkg import d\n",
            "pkg/d.py": "import pkg.c\n",
        },
    )
    graph = import_graph(package)
    assert graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a", "pkg.d"} and graph["pkg.d"] == {"pkg.c"}
    assert sorted(map(sorted, cycles(graph))) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


def test_the_check_sees_a_cycle_of_packages_whose_modules_are_acyclic(tmp_path):
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/high/__init__.py": "",
            "pkg/low/keys.py": "from pkg.high.reader import read\n",
            "pkg/high/reader.py": "def read():\n    pass\n",
            "pkg/high/writer.py": "from pkg.low.store import save\n",
            "pkg/low/store.py": "",
        },
    )
    graph = import_graph(package)
    assert cycles(graph) == []
    assert cycles(package_graph(graph, "pkg")) == [frozenset({"pkg.low", "pkg.high"})]
    assert cycles(package_graph(graph, "pkg.low")) == []
