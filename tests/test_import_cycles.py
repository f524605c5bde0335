"""No import cycle inside the package: the modules' import graph, read from the sources, is acyclic.

A cycle hidden behind an import inside a function (``corpus.py`` <-> ``shards.py`` once was one) still
means neither module can be read, tested or changed without the other, so imports inside functions
count here too. Only ``if TYPE_CHECKING:`` blocks are left out: they never run. Importing a module
or a submodule is an edge to it, importing any other name an edge to the module it comes from; the
implicit import of parent packages does not count (every package's ``__init__`` would otherwise be in
a cycle with its own modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "andrea_lab"

def module_names(package: Path) -> dict[str, Path]:
    """Dotted module name -> source file, ``__init__.py`` named as its package."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # a submodule by its name, any other name from the module itself
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {module for module in found if module in known and module != name}


def import_graph(package: Path) -> dict[str, set[str]]:
    names = module_names(package)
    return {name: imported_modules(name, path, set(names)) for name, path in names.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph(PACKAGE)
    assert "andrea_lab.data.shards" in graph["andrea_lab.data.corpus"]  # the graph sees the package's imports
    assert [sorted(cycle) for cycle in cycles(graph)] == []


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_check_sees_a_cycle_hidden_in_a_function(tmp_path):
    package = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import thing\n",
        "pkg/b.py": "def thing():\n    from pkg import a\n    return a\n",
        "pkg/c.py": "from . import a\nif TYPE_CHECKING:\n    from pkg import d\n",
        "pkg/d.py": "import pkg.c\n",
    })
    graph = import_graph(package)
    assert graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a"} and graph["pkg.d"] == {"pkg.c"}
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]
