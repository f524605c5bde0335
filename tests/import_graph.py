"""The package's own imports, read from its sources with ``ast`` (nothing is imported): which module imports
which, where (inside a function or at the top) and whether only for type checkers (``if TYPE_CHECKING:``).

Shared by tests/test_import_cycles.py (no cycle, of modules or of packages) and tests/test_layering.py
(imports only run downward; in-function imports say why). Importing a module or a submodule is an edge
to it, importing any other name an edge to the module it comes from; the implicit import of parent packages
does not count (every package's ``__init__`` would otherwise be in a cycle with its own modules).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "andrea_lab"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module of the package, dotted
    line: int
    in_function: bool
    type_checking: bool


def module_names(package: Path) -> dict[str, Path]:
    """Dotted module name -> source file, ``__init__.py`` named as its package."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _import_statements(tree: ast.AST):
    """``(node, in_function, type_checking)`` for every import statement of ``tree``."""
    stack = [(tree, False, False)]
    while stack:
        node, in_function, type_checking = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function, type_checking
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend((child, inside, True) for child in node.body)
            stack.extend((child, inside, type_checking) for child in node.orelse)
            continue
        stack.extend((child, inside, type_checking) for child in ast.iter_child_nodes(node))


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        anchor = name.split(".") if is_package else name.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    # a submodule by its name, any other name from the module itself
    return {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import of a package module by module ``name``, anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node, in_function, type_checking in _import_statements(tree):
        for target in sorted(_targets(node, name, path.name == "__init__.py", known)):
            if target in known and target != name:
                found.append(Import(name, target, node.lineno, in_function, type_checking))
    return sorted(found, key=lambda i: (i.line, i.target))


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports, anywhere in its source, type checking included."""
    return {found.target for found in imports_of(name, path, known)}


def all_imports(package: Path) -> list[Import]:
    names = module_names(package)
    return [found for name, path in names.items() for found in imports_of(name, path, set(names))]


def import_graph(package: Path) -> dict[str, set[str]]:
    names = module_names(package)
    return {name: imported_modules(name, path, set(names)) for name, path in names.items()}


def child_of(package: str, module: str) -> str | None:
    """The direct child of ``package`` (a module or a subpackage) that holds ``module``; None outside it."""
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1 :].split(".")[0]


def package_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The imports between the direct children of ``package``, each subpackage taken as one node."""
    children: dict[str, set[str]] = {}
    for source, targets in graph.items():
        a = child_of(package, source)
        if a is None:
            continue
        children.setdefault(a, set())
        for target in targets:
            b = child_of(package, target)
            if b is not None and b != a:
                children[a].add(b)
    return children


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, iter(sorted(graph.get(node, ())))))

    for start in sorted(graph):
        if start in index:
            continue
        work: list = []
        enter(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    enter(child)
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
