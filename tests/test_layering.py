"""Imports run downward only: each top-level entry of ``andrea_lab/`` sits in a named layer, and a module may
import its own layer and the layers below, never one above. Every kind of import counts (at the top, inside a
function, under ``if TYPE_CHECKING:``): an upward import is how a package cycle starts.

The layers, lowest first, are the lab's jobs (README.md's Layout block): plain utilities; data; what the
model is; the front door for plugin authors; a run on disk; one fit; looking inside one checkpoint; Hugging
Face interop; many runs (sweeps and comparisons); the subcommands; and the console entry. A new top-level
entry must be placed in a layer here, which makes that a visible choice.

A module imports another of the package inside a function only to keep a command's start-up fast (torch,
Lightning, matplotlib, Ray are seconds each); each such import says why in a comment on its line (or on
the line above a block of them).
"""

from __future__ import annotations

import re
from pathlib import Path

from import_graph import PACKAGE, Import, all_imports, module_names

#: Lowest first. Each entry of andrea_lab/ (module or package) in exactly one layer.
LAYERS: list[tuple[str, set[str]]] = [
    ("utilities", {"errors", "files", "safe_yaml", "_moved"}),
    ("data", {"data"}),
    ("model", {"model"}),
    ("plugin front door", {"plugin"}),
    ("run on disk", {"runs"}),
    ("one fit", {"fit"}),
    ("one checkpoint, inside", {"inside"}),
    ("interop", {"interop"}),
    ("many runs", {"experiments"}),
    ("subcommands", {"commands"}),
    ("console entry", {"cli"}),
]


def top_entry(module: str) -> str:
    """``andrea_lab.fit.stability.probe`` -> ``fit``; the package root itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(entry: str, layers=LAYERS) -> int:
    return next(rank for rank, (_, entries) in enumerate(layers) if entry in entries)


def upward_imports(imports: list[Import], layers=LAYERS) -> list[str]:
    """``"a -> b (layer -> higher layer)"`` for each import from a lower layer to a higher one."""
    found = []
    for found_import in imports:
        source, target = top_entry(found_import.source), top_entry(found_import.target)
        if not source or not target:
            continue  # andrea_lab/__init__.py names its lazy exports as strings; it imports only _moved
        if layer_of(target, layers) > layer_of(source, layers):
            found.append(
                f"{found_import.source} -> {found_import.target} "
                f"({layers[layer_of(source, layers)][0]} -> {layers[layer_of(target, layers)][0]})"
            )
    return found


def top_level_entries(package: Path) -> set[str]:
    return {
        path.stem
        for path in package.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").is_file()
    }


def test_every_top_level_entry_is_in_exactly_one_layer():
    placed = [entry for _, entries in LAYERS for entry in entries]
    assert len(placed) == len(set(placed))
    assert set(placed) == top_level_entries(PACKAGE)


def test_the_top_level_stays_short():
    assert len(top_level_entries(PACKAGE)) <= 14


def test_no_import_runs_upward():
    imports = all_imports(PACKAGE)
    assert any(i.source.startswith("andrea_lab.fit.") and i.target.startswith("andrea_lab.model.") for i in imports)
    assert upward_imports(imports) == []


def test_experiments_do_not_import_the_command_line():
    imports = all_imports(PACKAGE)
    assert [
        i for i in imports if top_entry(i.source) == "experiments" and top_entry(i.target) in {"cli", "commands"}
    ] == []


def test_the_check_sees_an_upward_import_of_any_kind():
    layers = [("low", {"low"}), ("high", {"high"})]
    imports = [
        Import("pkg.low.a", "pkg.high.b", 3, in_function=True, type_checking=False),
        Import("pkg.low.a", "pkg.low.c", 4, in_function=False, type_checking=True),
        Import("pkg.high.b", "pkg.low.c", 5, in_function=False, type_checking=False),
        Import("pkg.low.d", "pkg.high", 6, in_function=False, type_checking=True),
    ]
    assert upward_imports(imports, layers) == [
        "pkg.low.a -> pkg.high.b (low -> high)",
        "pkg.low.d -> pkg.high (low -> high)",
    ]


COMMENT = re.compile(r"#\s*\S")


def unexplained_function_imports(package: Path) -> list[str]:
    """``module:line`` of each in-function import of the package without a comment saying why."""
    sources = {name: path.read_text(encoding="utf-8").splitlines() for name, path in module_names(package).items()}
    missing = []
    for found in all_imports(package):
        if not found.in_function or found.type_checking:
            continue
        lines, row = sources[found.source], found.line - 1
        while row > 0 and lines[row - 1].strip().startswith(("from ", "import ")):
            row -= 1  # the first import of a block of them
        block = lines[row - 1 : found.line] if row > 0 else lines[: found.line]
        if not any(COMMENT.search(line) for line in block):
            missing.append(f"{found.source}:{found.line}")
    return sorted(set(missing))


def test_every_import_inside_a_function_says_why():
    assert unexplained_function_imports(PACKAGE) == []


def test_the_check_sees_an_unexplained_import_in_a_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "heavy.py").write_text("")
    (package / "a.py").write_text(
        "def f():\n    from pkg import heavy\n\n\n"
        "def g():\n    from pkg import heavy  # torch: not at start-up\n\n\n"
        "def h():\n    # both need torch\n    import pkg.heavy\n    from pkg.heavy import x\n"
    )
    assert unexplained_function_imports(package) == ["pkg.a:2"]
